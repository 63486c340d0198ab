"""The sketching loop: stream documents through a causal LM once and return the task's ``Signature``.

``sketch(args)`` runs under ``accelerate`` (plain ``python`` is one process): process k of N sketches the
documents with global index i ≡ k (mod N) into its own ``SketchState``; at the end a single all-reduce
adds the sums and counts of all processes (no sample is padded or repeated, unlike accelerate's
even-batches data loaders) and the main process writes the signature. Every ``checkpoint_every`` batches
each process saves its state and the global index it reached, so ``resume`` after a kill continues where
the checkpoint left off and yields the same sums as an uninterrupted run.

``sketch_texts`` / ``sketch_dataset`` are the in-process versions for an already loaded model.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from fisherhub import capture
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.core.state import SketchState
from fisherhub.data import DataArgs, DocumentCounts, DocumentStream, check_has_documents
from fisherhub.core.errors import InputError

#: test hook: a process kills itself (SIGKILL) after this many batches, to exercise ``resume``
CRASH_AFTER_BATCHES_ENV = "FISHERSKETCH_CRASH_AFTER_BATCHES"


@dataclasses.dataclass(kw_only=True)
class SketchArgs:
    """Everything ``sketch()`` needs. ``model=None`` is the embedded default (SmolLM2-135M-Instruct).

    ``like``: a signature file (or Hub ref when ``fisherhub.hub`` is installed) whose exact spec is
    reused, so the new signature is comparable with it; the spec options are then ignored, and with
    ``model=None`` the signature's base model is loaded.
    """

    data: DataArgs
    model: str | None = None
    model_revision: str | None = None
    dtype: str = "float32"
    m: int = 4096
    seed: int = 0
    estimator: str | None = None
    granularity: str = "token"
    fisher: str = "empirical"
    reflection: bool = True
    like: str | None = None
    batch_size: int = 8
    token_chunk_size: int = 256
    checkpoint: str | None = None
    checkpoint_every: int = 100
    resume: bool = False
    output: str | None = "signature.safetensors"
    push_to_hub: str | None = None
    push_repo_type: str = "dataset"
    cpu: bool | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("batch_size", "token_chunk_size", "checkpoint_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InputError(f"SketchArgs.{name} must be a positive int, got {value!r}")
        if self.resume and not self.checkpoint:
            raise InputError("resume needs the checkpoint folder of the interrupted run (--checkpoint DIR)")
        if not hasattr(torch, self.dtype) or not isinstance(getattr(torch, self.dtype), torch.dtype):
            raise InputError(f"unknown dtype {self.dtype!r}; use float32, bfloat16 or float16")

    def spec_options(self) -> dict[str, Any]:
        return {
            "m": self.m,
            "seed": self.seed,
            "estimator": self.estimator,
            "granularity": self.granularity,
            "fisher": self.fisher,
            "reflection": self.reflection,
        }


# -- references to signatures ---------------------------------------------------------------------
def load_signature_ref(ref: str | os.PathLike) -> Signature:
    """A signature from a local file or a Hub ref (``fisherhub.hub.load_signature``)."""
    from fisherhub.hub import load_signature

    return load_signature(os.fspath(ref))


# -- the loop shared by every entry point -------------------------------------------------------------
@dataclasses.dataclass
class Progress:
    """Where a process stands: its global position and the documents it looked at."""

    next_index: int = 0
    batches: int = 0
    counts: DocumentCounts = dataclasses.field(default_factory=DocumentCounts)


class Checkpointer:
    """Per-process checkpoints in a folder: ``rank{k}-of{N}.json`` names the state file it goes with.

    The state is written first (atomically, under a new name), then the JSON (atomically), then the
    previous state file is removed; a kill at any point leaves a consistent (state, position) pair.
    """

    def __init__(self, folder: str | os.PathLike, rank: int, world: int, run_key: dict[str, Any], every: int):
        self.folder = Path(folder)
        self.prefix = f"rank{rank}-of{world}"
        self.run_key = run_key
        self.every = every

    @property
    def _index_file(self) -> Path:
        return self.folder / f"{self.prefix}.json"

    def save(self, state: SketchState, progress: Progress) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        previous = self._read_index()
        state_file = f"{self.prefix}-batch{progress.batches}.safetensors"
        state.save(self.folder / state_file)
        record = {
            "run": self.run_key,
            "state_file": state_file,
            "next_index": progress.next_index,
            "batches": progress.batches,
            "counts": dataclasses.asdict(progress.counts),
        }
        tmp = self._index_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, sort_keys=True))
        os.replace(tmp, self._index_file)
        if previous and previous["state_file"] != state_file:
            (self.folder / previous["state_file"]).unlink(missing_ok=True)

    def _read_index(self) -> dict[str, Any] | None:
        if not self._index_file.is_file():
            return None
        return json.loads(self._index_file.read_text())

    def load(self, spec: SketchSpec, device: torch.device) -> tuple[SketchState, Progress]:
        """The saved state and position; a fresh start when this process had not checkpointed yet."""
        record = self._read_index()
        if record is None:
            return SketchState(spec, device=device), Progress()
        if record["run"] != self.run_key:
            differing = sorted(k for k in set(record["run"]) | set(self.run_key) if record["run"].get(k) != self.run_key.get(k))
            raise InputError(
                f"the checkpoint in {self.folder} is from a different run (differs in {differing}); resume with the "
                "same model, data, sketch options and number of processes, or use a new --checkpoint folder"
            )
        state = SketchState.load(self.folder / record["state_file"], device=device)
        progress = Progress(record["next_index"], record["batches"], DocumentCounts(**record["counts"]))
        return state, progress


def _crash_after() -> int | None:
    value = os.environ.get(CRASH_AFTER_BATCHES_ENV)
    return int(value) if value else None


def _run_batches(
    stream: DocumentStream,
    state: SketchState,
    model: torch.nn.Module,
    progress: Progress,
    *,
    batch_size: int,
    token_chunk_size: int,
    checkpointer: Checkpointer | None = None,
    show_progress: bool = True,
    description: str = "sketching",
) -> None:
    """Sketch the stream's batches from ``progress.next_index`` on, updating ``state`` and ``progress``."""
    from tqdm.auto import tqdm

    crash_after = _crash_after()
    stream.counts = progress.counts  # the stream counts into the progress record (restored on resume)
    total = stream.estimated_documents()
    bar = tqdm(total=total, initial=progress.counts.seen, unit="doc", desc=description, disable=not show_progress)
    tokens, started = 0, time.perf_counter()
    with bar:
        for batch in stream.batches(batch_size, start_index=progress.next_index):
            tokens += capture.sketch_batch(state, model, batch.as_model_inputs(), token_chunk_size=token_chunk_size)
            progress.next_index, progress.batches = batch.next_index, progress.batches + 1
            rate = tokens / (time.perf_counter() - started)
            bar.set_postfix(tokens=state.num_tokens, tok_per_s=f"{rate:.0f}", refresh=False)
            bar.update(stream.counts.seen - bar.n)
            if checkpointer is not None and progress.batches % checkpointer.every == 0:
                checkpointer.save(state, progress)
            if crash_after is not None and progress.batches >= crash_after:
                os.kill(os.getpid(), signal.SIGKILL)
        progress.next_index = max(progress.next_index, stream.position)
        bar.update(stream.counts.seen - bar.n)


def _model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _metadata(data: DataArgs, model_metadata: dict[str, str] | None) -> dict[str, str]:
    return {**data.provenance(), **(model_metadata or {})}


# -- in-process entry points ---------------------------------------------------------------------------
def resolve_spec(model, tokenizer, spec: SketchSpec | Signature | None = None, **spec_options) -> SketchSpec:
    """The spec to sketch ``model`` with: a given spec (checked against the head), the spec of a
    signature to be comparable with (``like``), or a new one from ``spec_options``."""
    if isinstance(spec, Signature):
        return capture.spec_for_model(model, tokenizer, like=spec)
    if spec is None:
        return capture.spec_for_model(model, tokenizer, **spec_options)
    if not isinstance(spec, SketchSpec):
        raise InputError(f"spec must be a SketchSpec, a Signature (like) or None, got {type(spec).__name__}")
    capture.check_spec_head(spec, model, tokenizer)
    return spec


def _main_process_reflection(accelerator, spec: SketchSpec) -> SketchSpec:
    """Every process sketches with the main process's pilot mean (each device computes its own, which
    may differ in the last bits; the sums of one signature must come from one set of projections)."""
    if accelerator.num_processes == 1 or spec.reflection is None:
        return spec
    from accelerate.utils import broadcast

    pilot = broadcast(spec.reflection_tensor.to(accelerator.device), from_process=0)
    return spec.with_reflection(pilot.cpu())


def sketch_dataset(
    dataset,
    model: torch.nn.Module,
    tokenizer,
    spec: SketchSpec | Signature | None = None,
    *,
    data: DataArgs | None = None,
    batch_size: int = 8,
    token_chunk_size: int = 256,
    metadata: dict[str, str] | None = None,
    progress: bool = False,
    description: str = "sketching",
    **spec_options,
) -> Signature:
    """Signature of ``dataset`` (a ``datasets`` object, path or Hub id) under ``model``, in this process.

    ``spec``: a ``SketchSpec``, a ``Signature`` to be comparable with, or None (``spec_options`` such as
    m, seed, estimator, granularity, fisher, reflection). ``data``: column and limit options
    (``DataArgs``; its ``dataset`` is replaced by ``dataset``).
    """
    data = dataclasses.replace(data, dataset=dataset) if data is not None else DataArgs(dataset)
    capture.check_tokenizer_matches(model, tokenizer)
    stream = DocumentStream(data, tokenizer)
    sketch_spec = resolve_spec(model, tokenizer, spec, **spec_options)
    state, state_progress = SketchState(sketch_spec, device=_model_device(model)), Progress()
    _run_batches(
        stream, state, model, state_progress, batch_size=batch_size, token_chunk_size=token_chunk_size,
        show_progress=progress, description=description,
    )
    check_has_documents(state_progress.counts.seen, state_progress.counts.too_short, data)
    return state.finalize(_metadata(data, metadata))


def sketch_texts(
    texts: Iterable[str],
    model: torch.nn.Module,
    tokenizer,
    spec: SketchSpec | Signature | None = None,
    *,
    max_length: int = 512,
    **options,
) -> Signature:
    """Signature of a list of texts (each a document, in order); options as for ``sketch_dataset``."""
    import datasets

    texts = list(texts)
    if not all(isinstance(text, str) for text in texts):
        raise InputError("sketch_texts takes an iterable of strings")
    dataset = datasets.Dataset.from_dict({"text": texts})
    return sketch_dataset(dataset, model, tokenizer, spec, data=DataArgs(dataset, max_length=max_length), **options)


# -- the accelerate entry point ------------------------------------------------------------------------
def make_accelerator(cpu: bool | None = None):
    """An ``Accelerator``; ``cpu=None`` uses the CPU when no accelerator device is available."""
    from accelerate import Accelerator

    if cpu is None:
        cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes") or not torch.accelerator.is_available()
    return Accelerator(cpu=cpu)


def _reduce_totals(accelerator, state: SketchState, counts: DocumentCounts) -> DocumentCounts:
    """One all-reduce (sum) of the state's sums and counts and the document counts; updates ``state``.

    Everything travels as one float64 vector (counts are exact below 2⁵³).
    """
    packed = torch.cat(
        [
            state.sums.flatten(),
            state.token_counts.double(),
            state.document_counts.double(),
            torch.tensor([counts.seen, counts.too_short], dtype=torch.float64, device=state.sums.device),
        ]
    )
    total = accelerator.reduce(packed, reduction="sum")
    size = state.sums.numel()
    state.sums.copy_(total[:size].view_as(state.sums))
    state.token_counts.copy_(total[size : size + 2].round().long())
    state.document_counts.copy_(total[size + 2 : size + 4].round().long())
    seen, too_short = total[size + 4 :].round().long().tolist()
    return DocumentCounts(seen=seen, too_short=too_short)


def _run_key(args: SketchArgs, spec: SketchSpec, world: int) -> dict[str, Any]:
    data = args.data
    return {
        "sketch_id": spec.sketch_id,
        "num_processes": world,
        **data.provenance(),
        "max_documents": data.max_documents,
        "max_tokens": data.max_tokens,
    }


def sketch(args: SketchArgs, accelerator=None) -> Signature:
    """Sketch ``args.data`` under ``args.model`` with every process of ``accelerator``; see the module doc.

    Returns the signature on every process; the main process writes ``args.output`` (and pushes it).
    """
    from fisherhub.defaults import DEFAULT_MODEL_REVISION, load_model_and_tokenizer, model_provenance
    from fisherhub.hub import push_signature

    accelerator = accelerator or make_accelerator(args.cpu)
    like = load_signature_ref(args.like) if args.like else None
    model_ref, revision = args.model, args.model_revision
    if like is not None and model_ref is None and like.metadata.get("base_model_revision") != DEFAULT_MODEL_REVISION:
        model_ref = like.metadata.get("base_model") or None
        revision = revision or like.metadata.get("base_model_revision") or None
    with accelerator.main_process_first():  # the first load may convert the default model into the cache
        model, tokenizer = load_model_and_tokenizer(model_ref, dtype=args.dtype, revision=revision)
    model.to(accelerator.device)
    capture.check_tokenizer_matches(model, tokenizer)
    stream = DocumentStream(args.data, tokenizer, accelerator.process_index, accelerator.num_processes)
    spec = _main_process_reflection(accelerator, capture.spec_for_model(model, tokenizer, like=like, **args.spec_options()))
    checkpointer = None
    if args.checkpoint:
        key = _run_key(args, spec, accelerator.num_processes)
        checkpointer = Checkpointer(
            args.checkpoint, accelerator.process_index, accelerator.num_processes, key, args.checkpoint_every
        )
    if args.resume:
        state, progress = checkpointer.load(spec, accelerator.device)
    else:
        state, progress = SketchState(spec, device=accelerator.device), Progress()
    _run_batches(
        stream, state, model, progress, batch_size=args.batch_size, token_chunk_size=args.token_chunk_size,
        checkpointer=checkpointer, show_progress=args.progress and accelerator.is_main_process,
        description=f"sketching ({accelerator.num_processes} process{'es' if accelerator.num_processes > 1 else ''})",
    )
    if checkpointer is not None:
        checkpointer.save(state, progress)
    totals = _reduce_totals(accelerator, state, progress.counts)
    check_has_documents(totals.seen, totals.too_short, args.data)
    metadata = _metadata(args.data, model_provenance(model_ref, model, revision).as_metadata())
    signature = state.finalize(metadata)
    if accelerator.is_main_process:
        if args.output:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            signature.save(args.output)
        if args.push_to_hub:
            push_signature(signature, args.push_to_hub, repo_type=args.push_repo_type, create_repo=True)
    accelerator.wait_for_everyone()
    return signature
