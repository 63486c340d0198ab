"""``SketchState``: the streaming sums of one task (SPEC §2, "Streaming state"; §2b for network specs).

Per half h ∈ {A, B} (document index mod 2) the state keeps Σφ, Σψ^a, Σψ^e in float64 (m each),
and token / document counts: 3 × 2 × m × 8 bytes = 192 KiB at m = 4096. States are sums, so they
merge by addition across batches, processes and runs.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from typing import NamedTuple, cast

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from fisherhub.core.atomic import atomic_path
from fisherhub.core.batch import HeadBatch
from fisherhub.core.errors import InputError, SignatureFileError, TooFewDocumentsError, TooFewDocumentsWarning
from fisherhub.core.features import SKETCHES, feature_map
from fisherhub.core.network import NetworkBatch
from fisherhub.core.parallel import map_row_ranges
from fisherhub.core.projectors import CPU_TRANSFORM_BLOCK_BYTES, _VocabularyProjector, row_blocks
from fisherhub.core.signature import CLAMPED_NORMS_KEY, Signature
from fisherhub.core.registry import MIN_DOCUMENTS
from fisherhub.core.spec import FORMAT_VERSION, SketchSpec

#: a split-sample norm within this many of its standard errors of zero is not resolved: it is clamped to that
#: bound and the signature says so (``CLAMPED_NORMS_KEY``).
SPLIT_NORM_Z = 2.0
#: the float64 features of a block of rows (``_add_range``) stay within this many bytes, so they stay in cache.
ACCUMULATE_BYTES = CPU_TRANSFORM_BLOCK_BYTES


class RangeTerms(NamedTuple):
    """A range of a batch's scored tokens: its rows, its four projections (u·a, v·a, s·e, t·e), each (n, m)
    float32, and whether its error projections are finite."""

    rows: slice
    projections: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
    finite: bool


class SketchState:
    """Split-half sums of random features for one task: ``update`` adds a batch, ``flush`` closes its
    documents, ``merge`` adds another process's sums, ``finalize`` gives the ``Signature``; ``save`` / ``load``
    checkpoint it.

    Args:
        spec (`SketchSpec`):
            The sketch (head or network) the sums are of.
        device (`torch.device` or `str`, *optional*):
            Where the sums live (the head's device).
    """

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
    def update(self, batch: HeadBatch | NetworkBatch) -> SketchState:
        """The one way in: a ``HeadBatch`` for a head spec, a ``NetworkBatch`` for a network spec (``modules``).

        A ``HeadBatch``'s scored tokens: a (N, d) and global document indices (N,) with e (N, K), or with
        z (N, K) and y (N,), projected as e = softmax(z) − onehot(y) without forming e (rows with y = −100
        are not scored). All tokens of a document must arrive before the next ``flush()`` (the sketcher
        flushes after each batch); a document is counted once per flush window.
        A ``NetworkBatch`` holds whole documents (``_update_network``).
        """
        network = self.spec.modules is not None
        if isinstance(batch, NetworkBatch) and network:
            return self._update_network(batch)
        if not isinstance(batch, (HeadBatch, NetworkBatch)):
            raise InputError(f"SketchState.update takes a HeadBatch or a NetworkBatch, got {type(batch).__name__}")
        if network or isinstance(batch, NetworkBatch):
            raise InputError(
                f"this state's spec is a {'network' if network else 'head'} spec: it takes "
                f"{'NetworkBatch' if network else 'HeadBatch'}es (lm.network.sketch_network_batch makes network ones)"
            )
        if self.spec.error_space == "head-input" and (
            batch.from_logits or not isinstance(batch.errors, torch.Tensor) or batch.errors.shape[1:] != (self.spec.d,)
        ):
            raise InputError(
                f"error space 'head-input' sketches δ = Wᵀe, the loss gradient at the head's input: give errors of "
                f"shape (N, d={self.spec.d}), not logits or e"
            )
        batch.check(self.spec.d, self.spec.error_dimension)
        device = self.sums.device
        rows = batch.scored_rows()
        batch = batch.scored()
        doc_index = batch.doc_index.to(device)
        halves = doc_index % 2
        documents, inverse = doc_index.unique(return_inverse=True)
        products = None if self.spec.granularity == "token" else self.sums.new_zeros(2, len(documents), self.spec.m)
        sums = self.sums.clone()  # put back if a range is refused: a refused batch adds nothing

        def add(term: RangeTerms) -> None:
            if batch.from_logits and not term.finite:
                raise InputError(
                    "logits contain NaN or +inf in scored rows; run the model in float32 or check the inputs"
                )
            self._add_range(term, halves, inverse, products)

        try:
            self._project_ranges(batch, None if rows is None else rows.to(device), add)
        except InputError:
            self.sums.copy_(sums)
            raise
        self.token_counts += torch.bincount(halves, minlength=2)
        for row, doc in enumerate(documents.tolist()):
            previous = self._open_documents.get(int(doc))
            if products is None:
                self._open_documents.setdefault(int(doc), torch.empty(0))
            else:
                self._open_documents[int(doc)] = products[:, row] if previous is None else previous + products[:, row]
        return self

    def _project_ranges(self, batch: HeadBatch, rows: torch.Tensor | None, add: Callable[[RangeTerms], None]) -> None:
        """``add`` the ``RangeTerms`` of a scored batch's row ranges in row order, the ranges projected in parallel
        (``parallel.map_row_ranges``: the bits of one single-threaded range). ``rows``: the logits rows scored."""
        device = self.sums.device
        fmap = feature_map(self.spec)
        activations = batch.activations.to(device).float()
        if batch.from_logits:
            assert batch.logits is not None and batch.targets is not None
            logits, targets = batch.logits.to(device), batch.targets.to(device)
            vocabulary = cast(_VocabularyProjector, fmap.error_projector)  # logits are over the vocabulary
        else:
            assert batch.errors is not None
            errors = batch.errors.to(device)

        def terms(part: slice) -> RangeTerms:
            ua, va = fmap.activation_projector.project(activations[part])
            if not batch.from_logits:
                se, te = fmap.error_projector.project(errors[part])
            elif rows is None:
                se, te = vocabulary.project_softmax_errors(logits[part], targets[part])
            else:
                se, te = vocabulary.project_softmax_errors(logits, targets[part], rows[part])
            finite = bool(torch.isfinite(se.sum(dim=1)).all() and torch.isfinite(te.sum(dim=1)).all())
            return RangeTerms(part, (ua, va, se, te), finite)

        map_row_ranges(activations.shape[0], terms, device, then=add)

    def _update_network(self, batch: NetworkBatch) -> SketchState:
        """Add a batch's features of this state's kernel: joint and error over all positions, activation
        over the scored ones; tokens = scored positions, documents = those with a scored position."""
        spec = self.spec
        if batch.feature_map.modules != spec.modules or batch.feature_map.m != spec.m:
            raise InputError("the batch was projected for other modules or another m than this state's spec")
        if batch.granularity != spec.granularity:
            raise InputError(f"the batch is of {batch.granularity} granularity, the state of {spec.granularity}")
        joint, activation, error = (f.to(self.sums.device).double() for f in batch.features(spec.kernel))
        halves = batch.doc_index.to(self.sums.device) % 2
        scored = batch.scored.to(self.sums.device)
        documents = batch.documents.to(self.sums.device)
        scored_documents = torch.isin(documents, batch.doc_index.to(self.sums.device)[scored])
        if spec.granularity == "token":
            self.sums[0].index_add_(0, halves, joint)
        else:
            self.sums[0].index_add_(0, documents[scored_documents] % 2, joint[scored_documents])
        self.sums[1].index_add_(0, halves[scored], activation[scored])
        self.sums[2].index_add_(0, halves, error)
        self.token_counts += torch.bincount(halves[scored], minlength=2)
        self.document_counts += torch.bincount(documents[scored_documents] % 2, minlength=2)
        return self

    def _add_range(
        self, term: RangeTerms, halves: torch.Tensor, inverse: torch.Tensor, products: torch.Tensor | None
    ) -> None:
        """Add a range's features to the half sums (token granularity: φ, ψ^a, ψ^e; sequence: ψ^a, ψ^e, and the
        products ((s·e)(u·a), (t·e)(v·a)) to ``products``, per document ``inverse``), row by row: ranges added
        in row order give the bits of one float64 sum over all rows. The features are formed and widened to
        float64 over blocks of rows that stay in cache (``projectors.row_blocks``), never for the whole range."""
        first_sketch = 0 if products is None else 1  # sequence: φ per document, at the flush
        fmap = feature_map(self.spec)
        row_bytes = 8 * len(SKETCHES) * self.spec.m
        for block in row_blocks(term.rows.stop - term.rows.start, row_bytes, self.sums.device, ACCUMULATE_BYTES):
            ua, va, se, te = (projection[block] for projection in term.projections)
            features = fmap.features_from_projections(ua, va, se, te).double()
            block_halves = halves[term.rows][block]
            for sketch in range(first_sketch, len(SKETCHES)):
                self.sums[sketch].index_add_(0, block_halves, features[sketch])
            if products is not None:
                block_documents = inverse[term.rows][block]
                products[0].index_add_(0, block_documents, (se * ua).double())
                products[1].index_add_(0, block_documents, (te * va).double())

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

    # -- merging --------------------------------------------------------------------------------
    def merge(self, other: SketchState) -> SketchState:
        """Add another state's sums and counts in place (exact up to float64 rounding)."""
        self.spec.require_compatible(other.spec, what="sketch states")
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
        if (reflection := self.spec.reflection_tensor) is not None:
            tensors["reflection"] = reflection
        metadata = {"format_version": str(FORMAT_VERSION), "kind": "fishersketch-state"}
        metadata["spec"] = json.dumps(self.spec.to_dict(), sort_keys=True)
        with atomic_path(path) as temporary:
            save_file(tensors, temporary, metadata=metadata)

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
        spec = SketchSpec.from_json(metadata["spec"], tensors.get("reflection"), f"{path}: its spec")
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
        return self.split_norms_and_stderrs()[0]

    def split_norms_and_stderrs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The split norms D = Σ_r x_r, x_r = μ̂^A_r μ̂^B_r, and their feature-level standard errors
        √(m/(m−1) Σ_r (x_r − D/m)²) (the m features treated as independent), (3,) float64 each."""
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
        products = means[:, 0] * means[:, 1]
        norms = products.sum(dim=1)
        spread = (products - norms[:, None] / self.spec.m).square().sum(dim=1)
        return norms, torch.sqrt(spread * self.spec.m / max(self.spec.m - 1, 1))

    def finalize(self, metadata: dict[str, str] | None = None):
        """The ``Signature`` of this task: means μ̂ (float32) and split-sample norms (float64).

        A split norm D within ``SPLIT_NORM_Z`` standard errors σ of zero is not resolved, and the signature's
        metadata ``CLAMPED_NORMS_KEY`` names the sketch (its alignments carry wide error bars: R̂ = ‖μ̂‖²/D is
        large). A positive D is kept as it is (it is unbiased); a non-positive one, for which no cosine exists,
        becomes ``SPLIT_NORM_Z`` σ, so the task's alignments shrink toward 0. With fewer than ``MIN_DOCUMENTS``
        documents a non-positive D is refused instead (``TooFewDocumentsError``, saying how many would be needed).
        """
        norms, stderrs = self.split_norms_and_stderrs()
        floors = SPLIT_NORM_Z * stderrs
        unresolved = norms <= floors
        metadata = dict(metadata or {})
        if unresolved.any():
            names = [name for name, flag in zip(SKETCHES, unresolved.tolist()) if flag]
            undefined = norms <= 0
            z = norms[unresolved] / stderrs[unresolved].clamp_min(1e-300)
            if undefined.any() and (self.num_documents < MIN_DOCUMENTS or not (floors[undefined] > 0).all()):
                raise TooFewDocumentsError(
                    f"split-sample norm of {names} not resolved (within {SPLIT_NORM_Z:g} standard errors of zero: "
                    f"z = {', '.join(f'{v:.2f}' for v in z.tolist())}) with {self.num_documents} documents and "
                    f"{self.num_tokens} tokens: sketch at least {documents_needed(self.num_documents, z)} documents "
                    f"(tasks of {MIN_DOCUMENTS} or more documents are returned flagged, with wide error bars)."
                )
            norms = torch.where(undefined, floors, norms)
            metadata[CLAMPED_NORMS_KEY] = ",".join(names)
            warnings.warn(
                f"this signature is not to be trusted yet: with {self.num_documents} documents ({self.num_tokens} "
                f"scored tokens) its split-sample norm of {names} is within {SPLIT_NORM_Z:g} standard errors of zero, "
                "so its alignments are mostly noise (values above 1, wide error bars); sketch at least "
                f"{documents_needed(self.num_documents, z)} documents",
                TooFewDocumentsWarning,
                stacklevel=2,
            )
        elif self.num_documents < MIN_DOCUMENTS:
            warnings.warn(
                f"this signature has {self.num_documents} documents ({self.num_tokens} scored tokens): below "
                f"{MIN_DOCUMENTS} the split-half estimate of its norm has noise its error bars do not show; sketch at "
                f"least {MIN_DOCUMENTS} documents to trust its alignments",
                TooFewDocumentsWarning,
                stacklevel=2,
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
            metadata=metadata,
        )


class NetworkSketchState(SketchState):
    """A ``SketchState`` that refuses a head spec: the state of a network signature (SPEC §2b)."""

    def __init__(self, spec: SketchSpec, device: torch.device | str = "cpu"):
        if spec.modules is None:
            raise InputError("NetworkSketchState needs a network spec (modules=...); use SketchState for the head")
        super().__init__(spec, device=device)


def documents_needed(documents: int, z: torch.Tensor) -> int:
    """Documents at which split norms now at ``z`` standard errors reach ``SPLIT_NORM_Z``: z grows about
    linearly with the number of documents while the self-pair noise dominates (σ ∝ 1/n), so n · Z / z;
    twice as many where z ≤ 0, and never fewer than ``MIN_DOCUMENTS``."""
    worst = float(z.min())
    scaled = documents * SPLIT_NORM_Z / worst if worst > 0 else 2 * documents
    return max(MIN_DOCUMENTS, math.ceil(scaled))
