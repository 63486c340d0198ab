"""What a repo holds at one commit, read once: from a Hub listing or ``repo_info`` online, from the local
cache offline (``HF_HUB_OFFLINE=1``), or from a local folder; and the signature entries it lists (its
``.fisher_signatures/index.json`` and legacy ``fisher_signatures/index.json``, else its card's block)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

from fisherhub.core.bounded import check_size, check_tree
from fisherhub.hub.cards import CARD_NAME, MAX_CARD_BYTES, card_text, parse_card, read_card, signature_entries
from fisherhub.hub.errors import CardError, OfflineCacheError, hub_errors
from fisherhub.hub.listing import LISTING_FOLDERS, MAX_INDEX_BYTES, index_bytes, merge_entries, parse_listing
from fisherhub.hub.refs import SignatureRef, is_signature_file
from fisherhub.hub.retry import with_retries

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RepoSnapshot:
    """A repo at one commit: ``ref.revision`` is the commit id, ``asked`` the revision asked for (None: the
    default branch). ``complete`` is False for a snapshot read from the cache, whose ``files`` are only the
    ones fetched before; ``listed`` is True for one from a listing (discovery)."""

    ref: SignatureRef
    files: dict[str, int | None]  # path -> size in bytes (None: not known)
    card_data: dict[str, Any] | None
    asked: str | None = None
    complete: bool = True
    listed: bool = False

    @classmethod
    def from_info(cls, info: Any, repo_type: str, asked: str | None = None, *, listed: bool = False) -> RepoSnapshot:
        """From a ``ModelInfo`` / ``DatasetInfo`` (``repo_info``, or with ``listed`` a listing's entry with
        sha, siblings, cardData)."""
        card = info.card_data
        card_data = card.to_dict() if hasattr(card, "to_dict") else card
        try:  # parsed by the client from the Hub's answer: bounded as a card's header is
            check_tree(card_data, f"{info.id}: its card metadata", max_values=MAX_CARD_BYTES, error=CardError)
        except CardError as exc:
            logger.warning("%s; read as if the repo had no card", exc)
            card_data = None
        files = {sibling.rfilename: sibling.size for sibling in info.siblings or []}
        return cls(SignatureRef(info.id, repo_type, info.sha), files, card_data, asked, listed=listed)

    @property
    def signature_files(self) -> dict[str, int | None]:
        return self.signature_files_in(None)

    def signature_files_in(self, subfolder: str | None) -> dict[str, int | None]:
        """The signature files under ``subfolder`` (None: the repo root), by their path from that folder."""
        prefix = f"{subfolder}/" if subfolder else ""
        inside = {path[len(prefix) :]: size for path, size in self.files.items() if path.startswith(prefix)}
        return {path: size for path, size in inside.items() if is_signature_file(path)}

    def cached_file(self, path: str) -> Path | None:
        """The cached copy of ``path`` at this commit (``try_to_load_from_cache``), None when it was not fetched."""
        found = try_to_load_from_cache(self.ref.repo_id, path, revision=self.ref.revision, repo_type=self.ref.repo_type)
        return Path(found) if isinstance(found, str) else None

    def entries(self, token: str | None = None, subfolder: str | None = None) -> list[dict[str, Any]]:
        """The signatures this commit lists: its index (``.fisher_signatures/index.json``, then the legacy
        ``fisher_signatures/index.json`` for paths it does not list), then the card block's entries for files
        no index lists (pushed by an older fisherhub, which wrote only the card). Files are fetched through the
        cache at the revision asked for, so that the cache can answer the same question offline. A snapshot
        from a listing (``listed``) takes the card block it carries when there is one: the indexes' rendering,
        from the same commit, so no download. With ``subfolder`` (an adapter saved under a folder of the repo)
        only that folder's indexes (the repo's card describes the repo, not the folder); its paths are
        relative to the folder. ``CardError`` when an index or the block is malformed."""
        if subfolder:
            return self._indexed(f"{subfolder}/", f"{self.ref} ({subfolder})", token)
        card = signature_entries(self.card_data, str(self.ref))
        if self.listed and card:
            return card
        if not self.complete or any(path in self.files for path in LISTING_FOLDERS):
            return merge_entries(self._indexed("", str(self.ref), token), card)
        if CARD_NAME in self.files and not self.listed:  # cached for offline use, read as the Hub did
            where = str(self.ref)
            check_size(self.files[CARD_NAME], f"{where}: {CARD_NAME}", max_bytes=MAX_CARD_BYTES, error=CardError)
            text = card_text(self.download(CARD_NAME, token), where)
            card = signature_entries(read_card(text, str(self.ref), self.ref.repo_type).data, str(self.ref))
        return card

    def _indexed(self, prefix: str, where: str, token: str | None) -> list[dict[str, Any]]:
        """The entries of the indexes under ``prefix`` of the repo (the cached copies offline), in reading order."""
        listings = []
        for path in LISTING_FOLDERS:
            if not self.complete:
                cached = self.cached_file(prefix + path)
                data = index_bytes(cached, where, path) if cached is not None else None
            elif prefix + path in self.files:
                check_size(self.files[prefix + path], f"{where}: {path}", max_bytes=MAX_INDEX_BYTES, error=CardError)
                data = index_bytes(self.download(prefix + path, token), where, path)
            else:
                data = None
            if data is not None:
                listings.append(parse_listing(data, where, path))
        return merge_entries(*listings)

    def download(self, path: str, token: str | None = None) -> Path:
        """``path`` of this commit through the cache, downloaded at the revision asked for so the cache learns
        which commit that revision is (for offline use); at the commit itself when the branch has moved."""
        commit = str(self.ref.revision)
        for revision in dict.fromkeys([self.asked or constants.DEFAULT_REVISION, commit]):
            with hub_errors(str(self.ref), path):
                hf_hub_download(self.ref.repo_id, path, repo_type=self.ref.repo_type, revision=revision, token=token)
            local = self.cached_file(path)  # there when the revision still is the commit
            if local is not None:
                return local
        raise AssertionError("unreachable: the last revision tried is the commit itself")


def cached_snapshot(repo: SignatureRef) -> RepoSnapshot:
    """The repo at ``repo.revision`` (default branch when None) as far as the local cache knows it, through
    ``snapshot_download(local_files_only=True)``: the commit the revision was last seen at (the name of the
    snapshot folder, ``snapshots/<commit id>/`` in the cache's documented layout), the files fetched at that
    commit, their card."""
    revision = repo.revision or constants.DEFAULT_REVISION
    try:
        folder = snapshot_download(repo.repo_id, repo_type=repo.repo_type, revision=revision, local_files_only=True)
    except IncompleteSnapshotError as exc:  # some files of the commit were never fetched: the rest is listed
        folder = exc.snapshot_path
    except LocalEntryNotFoundError as exc:
        raise OfflineCacheError(
            f"{repo}: HF_HUB_OFFLINE is set and the local cache ({constants.HF_HUB_CACHE}) holds nothing of this repo "
            f"at {revision}. List or load it once while online (e.g. `fisherhub list {repo.short()}`)"
        ) from exc
    snapshot = Path(folder)
    commit = snapshot.name
    files: dict[str, int | None] = {
        path.relative_to(snapshot).as_posix(): path.stat().st_size for path in snapshot.rglob("*") if path.is_file()
    }
    card_data = None
    if CARD_NAME in files:
        try:
            card_data = parse_card(card_text(snapshot / CARD_NAME, str(repo)), str(repo), repo.repo_type).data.to_dict()
        except CardError as exc:  # a malformed card lists nothing; the index may still
            logger.warning("%s: cached card unreadable (%s)", repo, exc)
    return RepoSnapshot(
        SignatureRef(repo.repo_id, repo.repo_type, commit), files, card_data, repo.revision, complete=False
    )


def repo_snapshot(repo: SignatureRef, token: str | None = None, *, files_metadata: bool = False) -> RepoSnapshot:
    """``repo`` at its revision: one ``repo_info`` call online (``files_metadata``: with file sizes; sent again
    after a 429 or 5xx, ``with_retries``), the local cache with ``HF_HUB_OFFLINE=1``."""
    if constants.HF_HUB_OFFLINE:
        return cached_snapshot(repo)
    with hub_errors(str(repo)):
        info = with_retries(
            lambda: HfApi(token=token).repo_info(
                repo.repo_id, repo_type=repo.repo_type, revision=repo.revision, files_metadata=files_metadata
            ),
            str(repo),
        )
    return RepoSnapshot.from_info(info, repo.repo_type, repo.revision)
