"""Signatures on the Hugging Face Hub (SPEC §4), through the ``huggingface_hub`` client.

``push_signature`` puts a signature file under ``fisher_signatures/`` of the dataset or adapter repo (or the
local folder) it describes and lists it in ``fisher_signatures/index.json`` and the card (one commit);
``list_signatures`` reads a repo's signatures from its index (else its card), file list and safetensors
headers; ``load_signature`` / ``download_signature`` fetch one by reference (offline from the cache too);
``find_adapters`` / ``find_signed_datasets`` discover repos by base model.
"""

from fisherhub.hub.cards import SIGNATURE_TAG
from fisherhub.hub.discovery import find_adapters, find_signed_datasets
from fisherhub.hub.errors import (
    AmbiguousSignatureError,
    CardError,
    ConcurrentPushError,
    GatedRepoAccessError,
    HubError,
    OfflineCacheError,
    RepoNotFoundError,
    SignatureNotFoundError,
)
from fisherhub.hub.index import INDEX_PATH
from fisherhub.hub.push import PushResult, push_signature
from fisherhub.hub.read import (
    SignatureInfo,
    download_signature,
    list_signatures,
    load_signature,
    snapshot_signatures,
)
from fisherhub.hub.refs import SignatureRef, signature_path
from fisherhub.hub.snapshot import RepoSnapshot, repo_snapshot

__all__ = [
    "INDEX_PATH",
    "SIGNATURE_TAG",
    "AmbiguousSignatureError",
    "CardError",
    "ConcurrentPushError",
    "GatedRepoAccessError",
    "HubError",
    "OfflineCacheError",
    "PushResult",
    "RepoNotFoundError",
    "RepoSnapshot",
    "SignatureInfo",
    "SignatureNotFoundError",
    "SignatureRef",
    "download_signature",
    "find_adapters",
    "find_signed_datasets",
    "list_signatures",
    "load_signature",
    "push_signature",
    "repo_snapshot",
    "signature_path",
    "snapshot_signatures",
]
