"""Find repos with signatures for a base model: adapters (by the Hub's tags, with a fallback for repos whose
card lost the signature tag) and dataset repos (by the signature tag, then their cards' block).

Each adapter comes back as the listing described it (``RepoSnapshot``: commit id, files, card), so ranking
it needs no further call for what the listing already said: with the card's block, one download of the
chosen signature file (HEAD + GET); without it, the index first (HEAD + GET).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from huggingface_hub import HfApi

from fisherhub.hub.cards import SIGNATURE_TAG, signature_entries
from fisherhub.hub.errors import CardError, hub_errors
from fisherhub.hub.listing import LISTING_FOLDERS, entry_matches
from fisherhub.hub.retry import RATE_LIMITED, RETRY_STATUSES, with_retries
from fisherhub.hub.snapshot import RepoSnapshot

if TYPE_CHECKING:
    from huggingface_hub.hf_api import ExpandModelProperty_T

#: what a listing returns per repo (``expand=``): enough to pin, list and choose without a repo_info call
LISTING_FIELDS: tuple[ExpandModelProperty_T, ...] = ("sha", "siblings", "cardData", "private")
#: what a listing of commits only asks of each repo (an index update's): its commit, whether it is private
COMMIT_FIELDS: tuple[ExpandModelProperty_T, ...] = ("sha", "private")


def adapter_tag(base_model: str) -> str:
    """The tag the Hub derives from an adapter card's ``base_model`` (with ``adapter_config.json`` in the repo)."""
    return f"base_model:adapter:{base_model}"


def _may_be_signed(snapshot: RepoSnapshot) -> bool:
    """Signature files in the repo, or training datasets named in its card (whose repos may carry them)."""
    return (
        any(path in snapshot.files for path in LISTING_FOLDERS)
        or bool(snapshot.signature_files)
        or bool((snapshot.card_data or {}).get("datasets"))
    )


@dataclasses.dataclass(frozen=True)
class AdapterListing:
    """The adapters of a base model, as the listing describes them: those that may be signed (signature files, or
    training datasets named in their card, whose repos may carry one), and the others."""

    signed: list[RepoSnapshot]
    unsigned: list[RepoSnapshot]


def list_adapters(base_model: str, *, token: str | None = None, untagged: bool = True) -> AdapterListing:
    """Adapter repos of ``base_model`` (pinned to the commit listed). First the Hub's own filter on both tags
    (``fisher-signatures`` and ``base_model:adapter:<id>``): signed; with ``untagged``, then every other adapter
    of ``base_model``: signed when its file list has signatures although its card lost the tag (a later
    ``push_to_hub`` rewrote the card), or its card names training datasets (their repos may carry the signature);
    else unsigned. Two listing calls in all (each paginated by the client), none per repo."""
    api = HfApi(token=token)
    found: dict[str, RepoSnapshot] = {}
    unsigned: list[RepoSnapshot] = []
    with hub_errors(f"the adapters of {base_model}"):
        for info in api.list_models(filter=[SIGNATURE_TAG, adapter_tag(base_model)], expand=list(LISTING_FIELDS)):
            found[info.id] = RepoSnapshot.from_info(info, "model", listed=True)
        if untagged:
            for info in api.list_models(filter=adapter_tag(base_model), expand=list(LISTING_FIELDS)):
                if info.id in found:
                    continue
                snapshot = RepoSnapshot.from_info(info, "model", listed=True)
                if _may_be_signed(snapshot):
                    found[info.id] = snapshot
                else:
                    unsigned.append(snapshot)
    return AdapterListing(list(found.values()), unsigned)


def find_adapters(base_model: str, *, token: str | None = None, untagged: bool = True) -> list[RepoSnapshot]:
    """The adapters of ``base_model`` that carry signatures, or may (``list_adapters``' ``signed``)."""
    return list_adapters(base_model, token=token, untagged=untagged).signed


def find_signed_datasets(base_model: str, *, sketch_id: str | None = None, token: str | None = None) -> list[str]:
    """Ids of dataset repos whose card lists a signature under ``base_model`` (and ``sketch_id`` when given)."""
    found = []
    for dataset in HfApi(token=token).list_datasets(filter=SIGNATURE_TAG, expand=["cardData"]):
        try:
            entries = signature_entries(dataset.card_data, dataset.id)
        except CardError:  # a malformed card lists nothing that can be loaded
            continue
        if any(entry_matches(entry, base_model, sketch_id) for entry in entries):
            found.append(dataset.id)
    return found


def described(snapshot: RepoSnapshot, token: str | None = None, once: bool = False) -> RepoSnapshot:
    """``snapshot`` with its files and card: as it is when it has them (``listed``), else (a listing of commits
    only) its ``model_info`` at its commit with the build's listing's fields; ``once``: a single attempt (a 429
    sent again after its ``Retry-After``, a 5xx raised at once)."""
    if snapshot.listed:
        return snapshot
    ref = snapshot.ref
    statuses = RATE_LIMITED if once else RETRY_STATUSES
    with hub_errors(str(ref), once=once):
        info = with_retries(
            lambda: HfApi(token=token).model_info(ref.repo_id, revision=ref.revision, expand=list(LISTING_FIELDS)),
            str(ref),
            statuses=statuses,
        )
    return RepoSnapshot.from_info(info, ref.repo_type, listed=True)
