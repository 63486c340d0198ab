"""``verify_signature``: re-sketch the dataset a signature names, at its recorded revision, under the recorded base
model revision and the signature's own spec, and say whether the published sketches are reproduced.

The comparison is on the sketch vectors, not on an alignment: for each of the joint, activation and error means
the relative difference ‖μ̂_new − μ̂_published‖ / ‖μ̂_published‖, and for the split norms |D_new − D| / |D|; the
document and token counts must be equal. ``VERIFY_TOLERANCE`` is what runs of the same data meet across dtypes
(a bfloat16 model against float32) and numbers of processes (tests/test_verify.py measures both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fisherhub.core.errors import InputError
from fisherhub.core.registry import GENERATED_SOURCE, SKETCHES

if TYPE_CHECKING:  # torch is imported on first use, so that `fisherhub verify --help` answers at once
    import torch

    from fisherhub.core.signature import Signature

#: the largest relative difference of a sketch vector (or split norm) that counts as reproduced
VERIFY_TOLERANCE = 0.05


@dataclasses.dataclass(frozen=True)
class Verification:
    """The outcome of ``verify_signature``: ``differences`` (relative, per sketch and per split norm),
    the published and re-sketched (documents, tokens), and whether they are within ``tolerance``. An
    unverifiable signature (its data is not a Hub dataset at a recorded commit) has ``reason`` and no
    differences."""

    reproduced: bool
    tolerance: float
    differences: dict[str, float] = dataclasses.field(default_factory=dict)
    published_counts: tuple[int, int] | None = None
    sketched_counts: tuple[int, int] | None = None
    reason: str | None = None

    @property
    def verifiable(self) -> bool:
        return self.reason is None

    def describe(self) -> str:
        if self.reason is not None:
            return f"unverifiable: {self.reason}"
        worst = max(self.differences, key=self.differences.__getitem__)
        verdict = "reproduced" if self.reproduced else "NOT reproduced"
        counts = (
            ""
            if self.published_counts == self.sketched_counts
            else (f"; documents, tokens {self.published_counts} published vs {self.sketched_counts} re-sketched")
        )
        return (
            f"{verdict}: largest relative difference {self.differences[worst]:.2e} ({worst}), tolerance "
            f"{self.tolerance:g}{counts}"
        )


def unverifiable_reason(signature: Signature) -> str | None:
    """Why ``signature`` cannot be re-sketched from public data (None: it can): its dataset must be a Hub id
    (``org/name``) at a recorded commit, under a named base model."""
    return unverifiable_metadata(signature.metadata)


def unverifiable_metadata(metadata: Mapping[str, Any]) -> str | None:
    """``unverifiable_reason`` of a signature with this metadata (an index row's, without the file)."""
    dataset, revision = metadata.get("dataset", ""), metadata.get("dataset_revision", "")
    if metadata.get("source") == GENERATED_SOURCE:
        return "sketched from the adapter's own samples, not from a dataset"
    if not metadata.get("base_model"):
        return "the signature names no base model"
    if "/" not in dataset or dataset.startswith(("<", "/", ".")):
        return f"its data ({dataset or 'unnamed'}) is not a Hub dataset: private or local data"
    if not revision:
        return f"no dataset revision recorded for {dataset}: the rows it was made from are not pinned"
    return None


def _relative(new: torch.Tensor, old: torch.Tensor) -> float:
    return float((new.double() - old.double()).norm() / old.double().norm().clamp_min(1e-300))


def compare(published: Signature, sketched: Signature, tolerance: float = VERIFY_TOLERANCE) -> Verification:
    """``published`` against a re-sketch of its data (see the module docstring)."""
    differences = {name: _relative(getattr(sketched, name), getattr(published, name)) for name in SKETCHES}
    for name, new, old in zip(SKETCHES, sketched.split_norms.tolist(), published.split_norms.tolist()):
        differences[f"{name} split norm"] = abs(new - old) / abs(old)
    counts = (published.num_documents, published.num_tokens), (sketched.num_documents, sketched.num_tokens)
    reproduced = counts[0] == counts[1] and all(value <= tolerance for value in differences.values())
    return Verification(reproduced, tolerance, differences, *counts)


def verify_signature(
    signature: Signature | str,
    *,
    model=None,
    tokenizer=None,
    token: str | None = None,
    tolerance: float = VERIFY_TOLERANCE,
    batch_size: int = 8,
    **data_options: Any,
) -> Verification:
    """Re-sketch the data ``signature`` names and compare the sketches (``compare``). The dataset is read at its
    recorded revision, config, split, text column, length and document limits.

    Args:
        signature (`Signature` or `str`):
            The signature, or a reference ``load_signature`` takes.
        model (`torch.nn.Module`, *optional*):
            The base model, with ``tokenizer`` (default: the recorded base model at its recorded revision).
        tokenizer (`PreTrainedTokenizerBase`, *optional*):
            Its tokenizer (with ``model``).
        token (`str`, *optional*):
            For private or gated Hub repos (loading the signature and the base model).
        tolerance (`float`, *optional*):
            The largest relative difference of a sketch (or split norm) that counts as reproduced.
        batch_size (`int`, *optional*):
            Documents per forward pass.
        **data_options:
            ``DataOptions`` fields that override the recorded ones, e.g. ``streaming=True``.

    Returns:
        `Verification`: reproduced or not, the differences per sketch and split norm, the counts; or the
        reason it is unverifiable (its data is not a Hub dataset at a recorded commit).

    Raises:
        `InputError`: only one of ``model`` and ``tokenizer``, or data or a model that cannot be loaded.
        `SignatureFileError`: the reference is not a valid signature.
    """
    from fisherhub.core.signature import Signature
    from fisherhub.hub import load_signature
    from fisherhub.lm.loading import load_base_model
    from fisherhub.options import DataOptions
    from fisherhub.pipeline.loop import sketch_dataset

    published = signature if isinstance(signature, Signature) else load_signature(signature, token=token)
    reason = unverifiable_reason(published)
    if reason is not None:
        return Verification(False, tolerance, reason=reason)
    metadata = published.metadata
    chat = metadata.get("scored", "").startswith("assistant tokens")
    column = metadata.get("text_column") or DataOptions.text_column
    limits = {
        key: int(metadata[key])
        for key in ("max_documents", "max_tokens", "max_length")
        if metadata.get(key, "").isdecimal()
    }
    fields: dict[str, Any] = {
        "config": metadata.get("dataset_config") or None,
        "split": metadata.get("dataset_split") or "train",
        "revision": metadata["dataset_revision"],
        ("messages_column" if chat else "text_column"): column,
        **limits,
        **data_options,
    }
    data = DataOptions(metadata["dataset"], **fields)
    if (model is None) != (tokenizer is None):
        raise InputError(
            "verify_signature: pass both model and tokenizer, or neither (the recorded base model is loaded)"
        )
    if model is None:
        model, tokenizer = load_base_model(metadata["base_model"], published, token)
    sketched = sketch_dataset(data.dataset, model, tokenizer, published, data=data, batch_size=batch_size)
    return compare(published, sketched, tolerance)
