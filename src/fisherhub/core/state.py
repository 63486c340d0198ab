"""``SketchState``: the streaming sums of one task (SPEC §2, "Streaming state").

Per half h ∈ {A, B} (document index mod 2) the state keeps Σφ, Σψ^a, Σψ^e in float64 (m each),
and token / document counts: 3 × 2 × m × 8 bytes = 192 KiB at m = 4096. States are sums, so they
merge by addition across batches, processes and runs.
"""

from __future__ import annotations

import json
import math
import os

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from fisherhub.core.features import SKETCHES, feature_map
from fisherhub.core.spec import FORMAT_VERSION, SketchSpec
from fisherhub.core.errors import IncompatibleSignaturesError, InputError, SignatureFileError, TooFewDocumentsError

#: targets of rows that are not scored (the cross-entropy convention of PyTorch and Hugging Face).
IGNORE_INDEX = -100


class SketchState:
    """Split-half sums of random features for one task."""

    def __init__(self, spec: SketchSpec, device: torch.device | str = "cpu"):
        self.spec = spec
        self.sums = torch.zeros(len(SKETCHES), 2, spec.m, dtype=torch.float64, device=device)
        self.token_counts = torch.zeros(2, dtype=torch.int64, device=device)
        self.document_counts = torch.zeros(2, dtype=torch.int64, device=device)
        self._open_documents: dict[int, torch.Tensor] = {}  # sequence granularity: doc -> (2, m)

    # -- counts ---------------------------------------------------------------------------------
    @property
    def num_tokens(self) -> int:
        return int(self.token_counts.sum())

    @property
    def num_documents(self) -> int:
        return int(self.document_counts.sum()) + len(self._open_documents)

    # -- streaming ------------------------------------------------------------------------------
    def update(self, activations: torch.Tensor, errors: torch.Tensor, doc_index: torch.Tensor) -> SketchState:
        """Add N scored tokens: activations (N, d), errors (N, K), global document indices (N,).

        All tokens of a document must arrive before the next ``flush()`` (the sketcher flushes
        after each batch); a document is counted once per flush window.
        """
        self._check_batch(activations, errors, doc_index)
        device = self.sums.device
        activations, errors, doc_index = activations.to(device), errors.to(device), doc_index.to(device)
        return self._accumulate(*feature_map(self.spec).projections(activations, errors), doc_index)

    def update_from_logits(
        self, activations: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor, doc_index: torch.Tensor
    ) -> SketchState:
        """``update`` with e = softmax(z) − onehot(y) computed from the logits z (N, K) and next tokens
        y (N,), without forming e (``project_softmax_errors``); rows with y = −100 are not scored."""
        if self.spec.error_space != "logits":
            raise InputError(f"update_from_logits sketches e; error space {self.spec.error_space!r} takes update(a, δ)")
        self._check_logits(logits, targets)
        device = self.sums.device
        scored = (targets != IGNORE_INDEX).nonzero().flatten()
        rows = None if len(scored) == len(targets) else scored.to(device)
        if isinstance(activations, torch.Tensor) and isinstance(doc_index, torch.Tensor) and rows is not None:
            if activations.shape[:1] != targets.shape or doc_index.shape != targets.shape:
                raise InputError(
                    f"row counts differ: activations {tuple(activations.shape)}, logits {tuple(logits.shape)}, "
                    f"doc_index {tuple(doc_index.shape)}"
                )
            activations, doc_index, targets = activations[scored], doc_index[scored], targets[scored]
        self._check_shapes(activations, len(targets), doc_index)
        activations, logits = activations.to(device), logits.to(device)
        targets, doc_index = targets.to(device), doc_index.to(device)
        fmap = feature_map(self.spec)
        ua, va = fmap.activation_projector.project(activations.float())
        se, te = fmap.error_projector.project_softmax_errors(logits, targets, rows)
        if not (torch.isfinite(se.sum(dim=1)).all() and torch.isfinite(te.sum(dim=1)).all()):
            raise InputError("logits contain NaN or +inf in scored rows; run the model in float32 or check the inputs")
        return self._accumulate(ua, va, se, te, doc_index)

    def _accumulate(
        self, ua: torch.Tensor, va: torch.Tensor, se: torch.Tensor, te: torch.Tensor, doc_index: torch.Tensor
    ) -> SketchState:
        """Add the features of N tokens from their four projections (each (N, m)) to the half sums."""
        halves = doc_index % 2
        features = feature_map(self.spec).features_from_projections(ua, va, se, te)  # (3, N, m)
        for sketch in range(0 if self.spec.granularity == "token" else 1, len(SKETCHES)):  # sequence: φ per document
            self.sums[sketch].index_add_(0, halves, features[sketch].double())
        self.token_counts += torch.bincount(halves, minlength=2)
        if self.spec.granularity == "token":
            for doc in doc_index.unique().tolist():
                self._open_documents.setdefault(int(doc), torch.empty(0))
        else:
            self._accumulate_documents(doc_index, (se * ua).double(), (te * va).double())
        return self

    def _accumulate_documents(self, doc_index: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> None:
        docs, inverse = doc_index.unique(return_inverse=True)
        partial = torch.zeros(2, len(docs), self.spec.m, dtype=torch.float64, device=first.device)
        partial[0].index_add_(0, inverse, first)
        partial[1].index_add_(0, inverse, second)
        for row, doc in enumerate(docs.tolist()):
            previous = self._open_documents.get(int(doc))
            self._open_documents[int(doc)] = partial[:, row] if previous is None else previous + partial[:, row]

    def flush(self) -> SketchState:
        """Close the documents seen since the last flush (count them; sequence: add their φ)."""
        if not self._open_documents:
            return self
        docs = torch.tensor(sorted(self._open_documents), dtype=torch.int64, device=self.sums.device)
        halves = docs % 2
        self.document_counts += torch.bincount(halves, minlength=2)
        if self.spec.granularity == "sequence":
            products = torch.stack([self._open_documents[int(d)] for d in docs.tolist()])
            phi = products[:, 0] * products[:, 1] / math.sqrt(self.spec.m)
            self.sums[0].index_add_(0, halves, phi)
        self._open_documents.clear()
        return self

    def _check_batch(self, activations: torch.Tensor, errors: torch.Tensor, doc_index: torch.Tensor) -> None:
        if not isinstance(errors, torch.Tensor):
            raise InputError(f"errors must be a torch.Tensor, got {type(errors).__name__}")
        if errors.ndim != 2 or errors.shape[1] != self.spec.error_dimension:
            what = "δ = Wᵀe is the gradient at the head's input" if self.spec.error_space == "head-input" else (
                "e must span the whole vocabulary of the head"
            )
            raise InputError(
                f"errors must have shape (N, {self.spec.error_dimension}) for error space {self.spec.error_space!r}, "
                f"got {tuple(errors.shape)}: {what}"
            )
        self._check_shapes(activations, errors.shape[0], doc_index)
        _check_finite("errors", errors)

    def _check_shapes(self, activations: torch.Tensor, rows: int, doc_index: torch.Tensor) -> None:
        """activations (N, d) finite floats and doc_index (N,) non-negative integers, N = ``rows`` > 0."""
        for name, tensor in (("activations", activations), ("doc_index", doc_index)):
            if not isinstance(tensor, torch.Tensor):
                raise InputError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if activations.ndim != 2 or activations.shape[1] != self.spec.d:
            raise InputError(f"activations must have shape (N, d={self.spec.d}), got {tuple(activations.shape)}")
        if doc_index.ndim != 1:
            raise InputError(f"doc_index must be 1-D (N,), got shape {tuple(doc_index.shape)}")
        n = activations.shape[0]
        if n == 0:
            raise InputError("empty batch: no scored tokens; skip the update instead")
        if rows != n or doc_index.shape[0] != n:
            raise InputError(f"row counts differ: activations {n}, errors/logits {rows}, doc_index {doc_index.shape[0]}")
        _check_finite("activations", activations)  # floating and finite
        if doc_index.is_floating_point() or doc_index.dtype == torch.bool:
            raise InputError(f"doc_index must be an integer tensor, got {doc_index.dtype}")
        if (doc_index < 0).any():
            raise InputError("doc_index must hold non-negative global document indices")

    def _check_logits(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or logits.shape[1] != self.spec.vocab_size:
            raise InputError(
                f"logits must be a tensor of shape (N, K={self.spec.vocab_size}), got "
                f"{tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__}"
            )
        if not logits.is_floating_point():
            raise InputError(f"logits must be a floating tensor, got {logits.dtype}")
        if not isinstance(targets, torch.Tensor) or targets.shape != logits.shape[:1] or targets.is_floating_point():
            raise InputError(f"targets must be an integer tensor of shape ({logits.shape[0]},) (next-token ids or -100)")
        valid = (targets == IGNORE_INDEX) | ((targets >= 0) & (targets < self.spec.vocab_size))
        if not valid.all():
            raise InputError(
                f"targets must be token ids in [0, K={self.spec.vocab_size}) or {IGNORE_INDEX}, found "
                f"{int(targets[~valid][0])}: the labels come from another tokenizer"
            )
        if not (targets != IGNORE_INDEX).any():
            raise InputError(f"no scored rows: every target is {IGNORE_INDEX}; skip the update instead")

    # -- merging --------------------------------------------------------------------------------
    def merge(self, other: SketchState) -> SketchState:
        """Add another state's sums and counts in place (exact up to float64 rounding)."""
        differences = self.spec.differences(other.spec)
        if differences:
            raise IncompatibleSignaturesError(differences, what="sketch states")
        self.flush()
        other.flush()
        self.sums += other.sums.to(self.sums.device)
        self.token_counts += other.token_counts.to(self.sums.device)
        self.document_counts += other.document_counts.to(self.sums.device)
        return self

    def __add__(self, other: SketchState) -> SketchState:
        return self.copy().merge(other)

    def copy(self) -> SketchState:
        self.flush()
        twin = SketchState(self.spec, device=self.sums.device)
        twin.sums.copy_(self.sums)
        twin.token_counts.copy_(self.token_counts)
        twin.document_counts.copy_(self.document_counts)
        return twin

    def to(self, device: torch.device | str) -> SketchState:
        self.flush()
        self.sums = self.sums.to(device)
        self.token_counts = self.token_counts.to(device)
        self.document_counts = self.document_counts.to(device)
        return self

    # -- persistence (resume) ---------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """Atomically write the state (safetensors) so a crash never leaves a half-written file."""
        self.flush()
        tensors = {
            "sums": self.sums.cpu(),
            "token_counts": self.token_counts.cpu(),
            "document_counts": self.document_counts.cpu(),
        }
        if self.spec.reflection is not None:
            tensors["reflection"] = self.spec.reflection_tensor
        metadata = {"format_version": str(FORMAT_VERSION), "kind": "fishersketch-state"}
        metadata["spec"] = json.dumps(self.spec.to_dict(), sort_keys=True)
        tmp = f"{os.fspath(path)}.tmp"
        save_file(tensors, tmp, metadata=metadata)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, device: torch.device | str = "cpu") -> SketchState:
        from safetensors import safe_open

        try:
            with safe_open(os.fspath(path), framework="pt") as handle:
                metadata = handle.metadata() or {}
            tensors = load_file(os.fspath(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise SignatureFileError(f"{path}: not a readable sketch state ({exc}); delete it to start over") from exc
        if metadata.get("kind") != "fishersketch-state" or metadata.get("format_version") != str(FORMAT_VERSION):
            raise SignatureFileError(
                f"{path}: not a fisherhub state of format version {FORMAT_VERSION} (metadata {metadata})"
            )
        spec = SketchSpec.from_dict(json.loads(metadata["spec"]), tensors.get("reflection"))
        state = cls(spec, device=device)
        if tensors["sums"].shape != state.sums.shape:
            raise SignatureFileError(f"{path}: sums of shape {tuple(tensors['sums'].shape)} do not match m={spec.m}")
        state.sums.copy_(tensors["sums"])
        state.token_counts.copy_(tensors["token_counts"])
        state.document_counts.copy_(tensors["document_counts"])
        return state

    # -- finishing ------------------------------------------------------------------------------
    def split_norms(self) -> torch.Tensor:
        """⟨μ̂^A, μ̂^B⟩ for the joint, activation and error sketches (float64, unbiased)."""
        self.flush()
        joint_counts = self.token_counts if self.spec.granularity == "token" else self.document_counts
        counts = torch.stack([joint_counts, self.token_counts, self.token_counts]).double()
        if (self.document_counts == 0).any():
            raise TooFewDocumentsError(
                f"the task has {self.num_documents} document(s) (half A: {int(self.document_counts[0])}, "
                f"half B: {int(self.document_counts[1])}); the split-sample norm needs documents with both even "
                "and odd global indices. Sketch at least 2 documents (in practice 20 or more)."
            )
        means = self.sums / counts[:, :, None]
        return (means[:, 0] * means[:, 1]).sum(dim=1)

    def finalize(self, metadata: dict[str, str] | None = None):
        """The ``Signature`` of this task: means μ̂ (float32) and split-sample norms (float64)."""
        from fisherhub.core.signature import Signature

        norms = self.split_norms()
        if (norms <= 0).any():
            bad = [name for name, value in zip(SKETCHES, norms.tolist()) if value <= 0]
            raise TooFewDocumentsError(
                f"split-sample norm not positive for {bad} with {self.num_documents} documents and "
                f"{self.num_tokens} tokens: the halves' means are too noisy to estimate ‖μ‖². "
                "Sketch more documents (a few hundred scored tokens per half at least)."
            )
        joint_total = self.token_counts.sum() if self.spec.granularity == "token" else self.document_counts.sum()
        totals = torch.stack([joint_total, self.token_counts.sum(), self.token_counts.sum()]).double()
        means = (self.sums.sum(dim=1) / totals[:, None]).float().cpu()
        return Signature(
            spec=self.spec,
            joint=means[0],
            activation=means[1],
            error=means[2],
            split_norms=norms.cpu(),
            num_tokens=self.num_tokens,
            num_documents=self.num_documents,
            metadata=dict(metadata or {}),
        )


def _check_finite(name: str, tensor: torch.Tensor) -> None:
    """Refuse NaN/inf by one fast pass over row sums (they propagate) instead of an (N, K) mask."""
    if not tensor.is_floating_point():
        raise InputError(f"{name} must be a floating tensor, got {tensor.dtype}")
    row_sums = tensor.sum(dim=1)
    if not torch.isfinite(row_sums).all():
        bad = (~torch.isfinite(row_sums)).nonzero().flatten()[:5].tolist()
        raise InputError(
            f"{name} contain NaN or inf (or overflow) in rows {bad}; run the model in float32 or check the inputs"
        )
