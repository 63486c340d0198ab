"""Signatures on the Hugging Face Hub (SPEC §4), through the ``huggingface_hub`` client.

``push_signature`` puts a signature file under ``.fisher_signatures/`` of the dataset or adapter repo (or the
local folder) it describes and lists it in ``.fisher_signatures/index.json`` and the card (one commit);
``list_signatures`` reads a repo's signatures from its index (else its card), file list and safetensors
headers; ``load_signature`` / ``download_signature`` fetch one by reference (offline from the cache too);
``find_adapters`` / ``find_signed_datasets`` discover repos by base model.
Names are imported on first use (the CLI's parsers load without torch).
"""

from fisherhub.core import lazy_attributes

_EXPORTS = {
    "SIGNATURE_TAG": "fisherhub.hub.cards",
    "find_adapters": "fisherhub.hub.discovery",
    "find_signed_datasets": "fisherhub.hub.discovery",
    "AmbiguousSignatureError": "fisherhub.hub.errors",
    "CardError": "fisherhub.hub.errors",
    "ConcurrentPushError": "fisherhub.hub.errors",
    "GatedRepoAccessError": "fisherhub.hub.errors",
    "HubAccessError": "fisherhub.hub.errors",
    "HubError": "fisherhub.hub.errors",
    "HubUnreachableError": "fisherhub.hub.errors",
    "OfflineCacheError": "fisherhub.hub.errors",
    "RepoNotFoundError": "fisherhub.hub.errors",
    "SignatureNotFoundError": "fisherhub.hub.errors",
    "INDEX_PATH": "fisherhub.hub.listing",
    "LISTING_PATH": "fisherhub.hub.listing",
    "PushResult": "fisherhub.hub.push",
    "push_signature": "fisherhub.hub.push",
    "SignatureInfo": "fisherhub.hub.read",
    "download_signature": "fisherhub.hub.read",
    "list_signatures": "fisherhub.hub.read",
    "load_signature": "fisherhub.hub.read",
    "snapshot_signatures": "fisherhub.hub.read",
    "SignatureRef": "fisherhub.hub.refs",
    "signature_path": "fisherhub.hub.refs",
    "RepoSnapshot": "fisherhub.hub.snapshot",
    "repo_snapshot": "fisherhub.hub.snapshot",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
