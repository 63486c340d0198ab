"""Hub error types, and the translation of ``huggingface_hub`` exceptions into them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from huggingface_hub import constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from fisherhub.core.errors import FisherHubError


class HubError(FisherHubError):
    """A Hub repo, revision, file or card that cannot be used as asked."""


class RepoNotFoundError(HubError):
    """The repo (or the revision asked for) does not exist, or is private and no token allows it."""


class GatedRepoAccessError(RepoNotFoundError):
    """The repo is gated: its files need access granted on its Hub page and a token of that account."""


class SignatureNotFoundError(HubError):
    """No signature file at the path asked for, or none in the repo that matches the filters."""


class AmbiguousSignatureError(HubError):
    """Several signatures in the repo match: the caller must choose one."""


class OtherBaseModelError(HubError):
    """A signature pushed into an adapter of another base model than the one it was sketched under."""


class ConcurrentPushError(HubError):
    """The branch moved between reading the card and committing: someone pushed meanwhile."""


class CardError(HubError):
    """The repo card's YAML header (or its ``fisher_signatures`` block) is malformed."""


class OfflineCacheError(HubError):
    """Offline (or the Hub unreachable) and the file is not in the local cache."""


class HubAccessError(HubError):
    """The Hub refused the request (401/403): no token, or one without the rights it needs."""


class HubUnreachableError(HubError):
    """The Hub could not be reached (no connection, wrong ``HF_ENDPOINT``)."""


class HubUnavailableError(HubError):
    """The Hub answered 429 (rate limited) or 5xx, and still did after the client's retries."""


@contextlib.contextmanager
def hub_errors(where: str, path: str | None = None, *, once: bool = False) -> Iterator[None]:
    """Re-raise the client's not-found and offline exceptions as ``HubError`` types naming ``where``
    (an ``hf://`` reference) and, for a missing file, ``path``, with what to do about it; ``once``: the request
    was a single attempt (no backoff on a 5xx; a 429 sent again after its Retry-After), which the message of a
    ``HubUnavailableError`` for a 5xx says."""
    try:
        yield
    except RevisionNotFoundError as exc:
        raise RepoNotFoundError(f"{where}: revision not found; check the branch, tag or commit id") from exc
    except GatedRepoError as exc:  # a subclass of RepositoryNotFoundError: first
        raise GatedRepoAccessError(
            f"{where}: gated: request access on the repo's Hub page, then use a token of the account that has it "
            "(HF_TOKEN or `hf auth login`)"
        ) from exc
    except RepositoryNotFoundError as exc:
        raise RepoNotFoundError(
            f"{where}: repository not found. Check the id and the repo type (a 'datasets/' prefix or "
            "--repo-type dataset for dataset repos); a private repo needs a token (HF_TOKEN); "
            "create a new repo with `huggingface_hub.HfApi().create_repo(...)` before pushing"
        ) from exc
    except RemoteEntryNotFoundError as exc:
        raise SignatureNotFoundError(
            f"{where}: no file {path!r} at this revision; `fisherhub list` shows the signatures it has"
        ) from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if getattr(exc, "response", None) is not None else None
        if status == 429 or (status or 0) >= 500:
            said = f"the Hub answered {status} ({'rate limited' if status == 429 else 'server error'})"
            tried = (
                "again, to a single attempt (no backoff: it did at an earlier run, after retrying)"
                if once and status != 429
                else "and still did after retrying"
            )
            raise HubUnavailableError(
                f"{where}: {said} {tried}: run again later (an index build or update resumes where it stopped)"
            ) from exc
        if status not in (401, 403):
            raise
        raise HubAccessError(
            f"{where}: the Hub refused the request ({status} {'unauthorized' if status == 401 else 'forbidden'}): "
            "use a token with write access to the repo (HF_TOKEN or `hf auth login`), or open a pull request "
            "instead (--create-pr)"
        ) from exc
    except HTTPError as exc:  # the client's other HTTP errors (its base class): no connection, timeouts
        raise HubUnreachableError(
            f"{where}: the Hub ({constants.ENDPOINT}) cannot be reached ({exc}): check the connection and HF_ENDPOINT, "
            "or read what is cached with HF_HUB_OFFLINE=1"
        ) from exc
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as exc:
        state = (
            "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"the Hub ({constants.ENDPOINT}) is unreachable"
        )
        what = (
            f"{path} is not in the local cache ({constants.HF_HUB_CACHE})"
            if path
            else "the repo's file list needs the Hub"
        )
        raise OfflineCacheError(
            f"{where}: {state} and {what}. Fetch it once while online (`fisherhub pull REF`, or load or select with "
            "it), pinning the revision you will use offline"
        ) from exc
