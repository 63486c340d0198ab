"""Push a signature to the repo it describes: the file and the card update in one commit (SPEC §4)."""

from __future__ import annotations

import dataclasses
import hashlib

from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.hf_api import RepoSibling

from fisherhub.core.signature import Signature
from fisherhub.hub.cards import (
    CARD_NAME,
    add_entry,
    card_entry,
    download_card,
    read_card,
)
from fisherhub.hub.errors import ConcurrentPushError, hub_errors
from fisherhub.hub.refs import SignatureRef, check_repo_type, signature_path


@dataclasses.dataclass(frozen=True)
class PushResult:
    """Where the signature is now. ``ref`` is pinned to the commit that holds it (the new commit, or the head
    that already had it when ``committed`` is False): ``load_signature(str(result.ref))`` reads it back."""

    ref: SignatureRef
    committed: bool
    commit_url: str | None = None
    pr_url: str | None = None


def _holds(sibling: RepoSibling | None, data: bytes) -> bool:
    """Whether the remote file is ``data``: its LFS sha256, or its git blob sha1 for a file stored in git."""
    if sibling is None:
        return False
    if sibling.lfs is not None:
        return sibling.lfs.sha256 == hashlib.sha256(data).hexdigest()
    return sibling.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def push_signature(
    signature: Signature,
    repo_id: str,
    repo_type: str = "dataset",
    *,
    revision: str | None = None,
    create_pr: bool = False,
    parent_commit: str | None = None,
    token: str | None = None,
    commit_message: str | None = None,
    repair_card: bool = False,
    create_repo: bool = False,
) -> PushResult:
    """Add ``signature`` under ``fisher_signatures/`` of a dataset or model (adapter) repo and list it in the
    card, in one commit on ``revision`` (default branch when None). The repo must exist unless
    ``create_repo`` (then it is created when missing, as ``push_to_hub`` does in transformers).

    The commit's parent is ``parent_commit``, by default the head the card was read at, so a push made by
    someone else in between fails with ``ConcurrentPushError`` instead of being overwritten. ``create_pr``
    opens a pull request (for repos one cannot write to). When the same file and card entry are already there,
    nothing is committed. A malformed card is refused unless ``repair_card`` (see ``cards.read_card``).
    """
    path = signature_path(signature)
    repo = SignatureRef(repo_id, check_repo_type(repo_type), revision)
    data = signature.to_bytes()
    api = HfApi(token=token)
    with hub_errors(str(repo)):
        if create_repo:
            api.create_repo(repo_id, repo_type=repo_type, exist_ok=True)
        info = api.repo_info(repo_id, repo_type=repo_type, revision=revision, files_metadata=True)
    head = dataclasses.replace(repo, revision=info.sha)
    files = {sibling.rfilename: sibling for sibling in info.siblings or []}
    old_card = download_card(head, token)[0] if CARD_NAME in files else None
    card = read_card(old_card, str(repo), repair=repair_card)
    add_entry(card, card_entry(signature, path), repo)
    new_card = str(card)
    if new_card == old_card and _holds(files.get(path), data):
        return PushResult(head.with_path(path), committed=False)

    metadata = signature.metadata
    described = f"{metadata.get('dataset')} under {metadata['base_model']}" if metadata.get("dataset") else metadata["base_model"]
    operations = [CommitOperationAdd(path, data), CommitOperationAdd(CARD_NAME, new_card.encode("utf-8"))]
    try:
        with hub_errors(str(repo)):
            commit = api.create_commit(
                repo_id,
                operations,
                commit_message=commit_message or f"Add Fisher signature of {described} ({signature.sketch_id})",
                repo_type=repo_type,
                revision=revision,
                create_pr=create_pr,
                parent_commit=parent_commit or info.sha,
            )
    except HfHubHTTPError as exc:
        if exc.response is None or exc.response.status_code != 412:
            raise
        raise ConcurrentPushError(
            f"{repo}: someone pushed to {revision or 'the default branch'} after its card was read at commit "
            f"{(parent_commit or info.sha)[:7]}; nothing was written. Push again: it re-reads the card and keeps "
            "their changes"
        ) from exc
    return PushResult(SignatureRef(repo_id, repo_type, commit.oid, path), True, commit.commit_url, commit.pr_url)
