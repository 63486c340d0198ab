"""Signatures on the Hugging Face Hub (SPEC §4), through the ``huggingface_hub`` client.

``push_signature`` puts a signature file under ``fisher_signatures/`` of the dataset or adapter repo it
describes and lists it in the card (one commit); ``list_signatures`` reads a repo's signatures from its card,
file list and safetensors headers; ``load_signature`` / ``download_signature`` fetch one by reference (offline
from the cache too); ``find_adapters`` / ``find_signed_datasets`` discover repos by base model.
"""

from fisherhub.hub.cards import SIGNATURE_TAG
from fisherhub.hub.discovery import find_adapters, find_signed_datasets
from fisherhub.hub.errors import (
    AmbiguousSignatureError,
    CardError,
    ConcurrentPushError,
    HubError,
    OfflineCacheError,
    RepoNotFoundError,
    SignatureNotFoundError,
)
from fisherhub.hub.push import PushResult, push_signature
from fisherhub.hub.read import (
    SignatureInfo,
    download_signature,
    list_signatures,
    load_signature,
)
from fisherhub.hub.refs import SignatureRef, signature_path

__all__ = [
    "SIGNATURE_TAG",
    "AmbiguousSignatureError",
    "CardError",
    "ConcurrentPushError",
    "HubError",
    "OfflineCacheError",
    "PushResult",
    "RepoNotFoundError",
    "SignatureInfo",
    "SignatureNotFoundError",
    "SignatureRef",
    "download_signature",
    "find_adapters",
    "find_signed_datasets",
    "list_signatures",
    "load_signature",
    "push_signature",
    "signature_path",
]
