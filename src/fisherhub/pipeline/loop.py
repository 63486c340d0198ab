"""The sketching loop: stream documents through a causal LM once and return the task's ``Signature``.

One loop for head and network signatures: the spec chooses the capture strategy of a batch (``capture``:
``lm.capture.sketch_batch``, one inference forward pass, for a head spec; ``lm.network.sketch_network_batch``,
a forward and a backward pass, for a network spec with ``modules``), and everything else (sharding, the
all-reduce, checkpoints and resume) is the same.

``sketch(args)`` runs under ``accelerate`` (plain ``python`` is one process): process k of N sketches the
documents with global index i ≡ k (mod N), or its shards of a stream (``data.stream.DocumentStream``), into its
own ``SketchState``; at the end a single all-reduce
adds the sums and counts of all processes (no sample is padded or repeated, unlike accelerate's
even-batches data loaders) and every process returns the signature. Every ``checkpoint_every`` batches
each process saves its state and the global index it reached, so ``resume`` after a kill continues where
the checkpoint left off and yields the same sums as an uninterrupted run. Nothing is written but
checkpoints: the CLI writes and pushes the signature.

``sketch_texts`` / ``sketch_dataset`` (and ``sketch_network_kernels``: several kernels from one pass) are the
in-process versions for an already loaded model.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from fisherhub.core.errors import InputError
from fisherhub.core.registry import KERNELS
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.core.state import SketchState
from fisherhub.data.sources import load_source
from fisherhub.data.stream import DocumentStream, check_has_documents
from fisherhub.lm.capture import sketch_batch
from fisherhub.lm.head import HeadModel
from fisherhub.lm.loading import loaded_model_provenance
from fisherhub.lm.network import sketch_network_batch
from fisherhub.lm.positions import within_model_context
from fisherhub.lm.specs import check_spec_head, spec_for_model
from fisherhub.options import DataOptions, RunOptions, SketchJobOptions
from fisherhub.pipeline.processes import all_shard_sizes, main_process_reflection, make_accelerator, reduce_totals
from fisherhub.pipeline.checkpoints import Checkpointer, Progress, check_checkpoint_folder

logger = logging.getLogger(__name__)

#: test hook: a process kills itself (SIGKILL) after this many batches, to exercise ``resume``
CRASH_AFTER_BATCHES_ENV = "FISHERHUB_CRASH_AFTER_BATCHES"


def _crash_after() -> int | None:
    value = os.environ.get(CRASH_AFTER_BATCHES_ENV)
    return int(value) if value else None


def capture(states: Sequence[SketchState], head: HeadModel, *, token_chunk_size: int) -> Callable[[Mapping], int]:
    """The capture strategy the spec chooses: a function that adds one batch (model inputs with ``doc_index``)
    to ``states`` and returns its scored tokens. A head spec: one state, ``lm.capture.sketch_batch``; a network
    spec: ``lm.network.sketch_network_batch`` into every state (specs that differ in their kernel only)."""
    if states[0].spec.modules is not None:
        return lambda batch: sketch_network_batch(states, head, batch)
    if len(states) != 1:
        raise InputError("one pass sketches several states only for network specs that differ in their kernel")
    return lambda batch: sketch_batch(states[0], head, batch, token_chunk_size=token_chunk_size)


def _run_batches(
    stream: DocumentStream,
    states: Sequence[SketchState],
    sketch_one: Callable[[Mapping], int],
    progress: Progress,
    *,
    batch_size: int,
    checkpointer: Checkpointer | None = None,
    show_progress: bool = True,
    description: str = "sketching",
) -> None:
    """Sketch the stream's batches from ``progress.next_index`` on with ``sketch_one`` (``capture``), updating
    ``states`` and ``progress``; a ``checkpointer`` saves the one state of a run."""
    from huggingface_hub.utils import tqdm  # off under HF_HUB_DISABLE_PROGRESS_BARS=1 or disable_progress_bars()

    if checkpointer is not None and len(states) != 1:
        raise InputError("checkpoints hold one sketch state: sketch one kernel per run to checkpoint it")
    crash_after = _crash_after()
    stream.counts = progress.counts  # the stream counts into the progress record (restored on resume)
    total = stream.estimated_documents()
    bar = tqdm(total=total, initial=progress.counts.seen, unit="doc", desc=description, disable=not show_progress)
    tokens, started = 0, time.perf_counter()
    with bar:
        for batch in stream.batches(batch_size, start_index=progress.next_index, reading_state=progress.reading_state):
            tokens += sketch_one(batch.as_model_inputs())
            progress.next_index, progress.batches = batch.next_index, progress.batches + 1
            rate = tokens / (time.perf_counter() - started)
            bar.set_postfix(tokens=states[0].num_tokens, tok_per_s=f"{rate:.0f}", refresh=False)
            bar.update(stream.counts.seen - bar.n)
            if checkpointer is not None and progress.batches % checkpointer.every == 0:
                progress.reading_state = stream.reading_state()
                checkpointer.save(states[0], progress)
            if crash_after is not None and progress.batches >= crash_after:
                os.kill(os.getpid(), signal.SIGKILL)
        progress.next_index = max(progress.next_index, stream.position)
        progress.reading_state = stream.reading_state()
        bar.update(stream.counts.seen - bar.n)


def _metadata(data: DataOptions, source, model_metadata: dict[str, str] | None) -> dict[str, str]:
    """What the signature records about its data and model, taken before the run (the commit a stream reads is
    the one its id resolves to at the start)."""
    from fisherhub.data.provenance import dataset_provenance

    return {**dataset_provenance(data, source), **(model_metadata or {})}


# -- in-process entry points ---------------------------------------------------------------------------
def resolve_spec(head: HeadModel, tokenizer, spec: SketchSpec | Signature | None = None, **spec_options) -> SketchSpec:
    """The spec to sketch with: a given spec (checked against the head), the spec of a signature to be
    comparable with (``like``), or a new one from ``spec_options`` (``SpecOptions`` fields)."""
    if isinstance(spec, Signature):
        return spec_for_model(head, tokenizer, like=spec)
    if spec is None:
        return spec_for_model(head, tokenizer, **spec_options)
    if not isinstance(spec, SketchSpec):
        raise InputError(f"spec must be a SketchSpec, a Signature (like) or None, got {type(spec).__name__}")
    check_spec_head(spec, head)
    return spec


def _sketch_in_process(
    dataset,
    model,
    tokenizer,
    spec,
    kernels: Sequence[str] | None,
    *,
    data: DataOptions | None,
    batch_size: int,
    token_chunk_size: int,
    metadata: dict[str, str] | None,
    progress: bool,
    description: str,
    **spec_options,
) -> list[Signature]:
    """The signatures of one pass of ``dataset``: of the resolved spec, or of it with each of ``kernels``."""
    data = dataclasses.replace(data, dataset=dataset) if data is not None else DataOptions(dataset)
    source = load_source(data)
    head = HeadModel.of(model, tokenizer)
    data = within_model_context(data, head.base)
    if not (metadata or {}).get("base_model") and (provenance := loaded_model_provenance(head.base)) is not None:
        metadata = {**provenance.as_metadata(), **(metadata or {})}
    recorded = _metadata(data, source, metadata)
    stream = DocumentStream(data, tokenizer, source=source)
    sketch_spec = resolve_spec(head, tokenizer, spec, **spec_options)
    specs = (
        [sketch_spec]
        if kernels is None
        else [dataclasses.replace(sketch_spec, kernel=k) for k in dict.fromkeys(kernels)]
    )
    states, state_progress = [SketchState(s, device=head.device) for s in specs], Progress()
    _run_batches(
        stream,
        states,
        capture(states, head, token_chunk_size=token_chunk_size),
        state_progress,
        batch_size=batch_size,
        show_progress=progress,
        description=description,
    )
    check_has_documents(
        state_progress.counts.seen, state_progress.counts.too_short, data, states[0].document_counts.tolist()
    )
    return [state.finalize(recorded) for state in states]


def sketch_dataset(
    dataset,
    model: torch.nn.Module | HeadModel,
    tokenizer,
    spec: SketchSpec | Signature | None = None,
    *,
    data: DataOptions | None = None,
    batch_size: int = RunOptions.batch_size,
    token_chunk_size: int = RunOptions.token_chunk_size,
    metadata: dict[str, str] | None = None,
    progress: bool = False,
    description: str = "sketching",
    **spec_options,
) -> Signature:
    """Signature of ``dataset`` under ``model``, in this process (``sketch`` runs on every process of an
    ``accelerate`` launch). The dataset is checked before the model runs; nothing is written.

    Args:
        dataset (`datasets.Dataset`, `datasets.IterableDataset`, `str` or `os.PathLike`):
            The documents: a ``datasets`` object, a Hub dataset id, a local folder or a data file / glob.
        model (`torch.nn.Module` or `HeadModel`):
            A ``transformers`` causal LM (maybe PEFT-wrapped).
        tokenizer (`PreTrainedTokenizerBase`):
            Its tokenizer.
        spec (`SketchSpec` or `Signature`, *optional*):
            The sketch, or a signature to be comparable with (its spec is reused once the model's head
            matches); None makes one from ``spec_options``.
        data (`DataOptions`, *optional*):
            Columns, split and limits (its ``dataset`` is replaced by ``dataset``).
        batch_size (`int`, *optional*):
            Documents per forward pass.
        token_chunk_size (`int`, *optional*):
            Scored tokens per softmax chunk (memory: about this many rows of K floats).
        metadata (`dict[str, str]`, *optional*):
            Extra signature metadata. Without a ``base_model``, the signature records the model's
            ``config.name_or_path`` (its Hub id or folder), which ``push_signature`` needs.
        progress (`bool`, *optional*):
            Show a progress bar (it honours the Hub's progress-bar switches).
        description (`str`, *optional*):
            The progress bar's label.
        **spec_options:
            Fields of ``SpecOptions`` for a new spec (m, seed, estimator, granularity, fisher, reflection,
            error_space; ``modules=`` or ``adapters=``, and ``kernel``, make a network signature, SPEC §2b).

    Returns:
        `Signature`: the dataset's signature.

    Raises:
        `InputError`: a dataset, column or option that cannot be read, a model without a linear head, a spec
            for another model.
        `TooFewDocumentsError`: too few documents to resolve a split-sample norm.
    """
    return _sketch_in_process(
        dataset,
        model,
        tokenizer,
        spec,
        None,
        data=data,
        batch_size=batch_size,
        token_chunk_size=token_chunk_size,
        metadata=metadata,
        progress=progress,
        description=description,
        **spec_options,
    )[0]


def sketch_network_kernels(
    dataset,
    model: torch.nn.Module | HeadModel,
    tokenizer,
    spec: SketchSpec | Signature | None = None,
    *,
    kernels: Sequence[str] = KERNELS,
    data: DataOptions | None = None,
    batch_size: int = RunOptions.batch_size,
    metadata: dict[str, str] | None = None,
    progress: bool = False,
    **spec_options,
) -> dict[str, Signature]:
    """Network signatures of ``dataset`` for several kernels from one pass (the projections are shared):
    kernel -> ``Signature``; ``spec`` / options as for ``sketch_dataset`` (the spec's kernel is replaced by each)."""
    signatures = _sketch_in_process(
        dataset,
        model,
        tokenizer,
        spec,
        kernels,
        data=data,
        batch_size=batch_size,
        token_chunk_size=RunOptions.token_chunk_size,
        metadata=metadata,
        progress=progress,
        description="network sketch",
        **spec_options,
    )
    if signatures[0].spec.modules is None:
        raise InputError("sketch_network_kernels needs a network spec: give modules= or adapters= (or such a spec)")
    return {signature.spec.kernel: signature for signature in signatures}


def sketch_texts(
    texts: Iterable[str],
    model: torch.nn.Module | HeadModel,
    tokenizer,
    spec: SketchSpec | Signature | None = None,
    *,
    max_length: int = DataOptions.max_length,
    **options,
) -> Signature:
    """Signature of a list of texts, each a document, in order.

    Args:
        texts (`Iterable[str]`):
            The documents (a list of strings, not one string).
        model (`torch.nn.Module` or `HeadModel`):
            A ``transformers`` causal LM (maybe PEFT-wrapped).
        tokenizer (`PreTrainedTokenizerBase`):
            Its tokenizer.
        spec (`SketchSpec` or `Signature`, *optional*):
            As for ``sketch_dataset``.
        max_length (`int`, *optional*):
            Truncate documents to this many tokens.
        **options:
            Those of ``sketch_dataset`` (``modules=`` or ``adapters=``: a network signature).

    Returns:
        `Signature`: the texts' signature.

    Raises:
        `InputError`: one string instead of a list, an empty list or non-strings, and as for ``sketch_dataset``.
        `TooFewDocumentsError`: too few documents to resolve a split-sample norm.
    """
    import datasets

    if isinstance(texts, str):
        raise InputError(
            f"sketch_texts takes a list of texts (one document each), got one string of {len(texts)} characters, "
            "which would be sketched as that many one-character documents: pass [text], or split it into documents"
        )
    texts = list(texts)
    if not texts or not all(isinstance(text, str) for text in texts):
        raise InputError("sketch_texts takes a non-empty iterable of strings (one document each)")
    dataset = datasets.Dataset.from_dict({"text": texts})
    return sketch_dataset(dataset, model, tokenizer, spec, data=DataOptions(dataset, max_length=max_length), **options)


# -- the accelerate entry point ------------------------------------------------------------------------
def _run_key(args: SketchJobOptions, spec: SketchSpec, world: int, dataset_fingerprint: str | None) -> dict[str, Any]:
    """What a resumed run must share with the checkpointed one (the batch size may change)."""
    data = args.data
    return {
        "sketch_id": spec.sketch_id,
        "num_processes": world,
        "model": args.model,
        "model_revision": args.model_revision,
        "model_dtype": args.dtype,
        "dataset_fingerprint": dataset_fingerprint,
        **data.provenance(),
        "max_documents": data.max_documents,
        "max_tokens": data.max_tokens,
    }


def _load_model(args: SketchJobOptions, like: Signature | None, accelerator):
    """(model, tokenizer, provenance) of ``args.model`` (else the base model ``like`` names, at its revision), on
    this process's device unless ``args.device_map`` spreads it; the main process loads first (the first load may
    convert the default model into the cache) and warns when adapters will not match the recorded id."""
    from fisherhub.lm.loading import DEFAULT_MODEL_REVISION, load_model_and_tokenizer, model_provenance

    model_ref, revision = args.model, args.model_revision
    if like is not None and model_ref is None and like.metadata.get("base_model_revision") != DEFAULT_MODEL_REVISION:
        model_ref = like.metadata.get("base_model") or None
        revision = revision or like.metadata.get("base_model_revision") or None
    with accelerator.main_process_first():
        model, tokenizer = load_model_and_tokenizer(
            model_ref,
            dtype=args.dtype,
            revision=revision,
            device_map=args.device_map,
            trust_remote_code=args.trust_remote_code,
            quantization_config=args.quantization_config,
            gguf_file=args.gguf_file,
        )
    if args.device_map is None:
        model.to(accelerator.device)
    provenance = model_provenance(model_ref, model, revision, args.gguf_file, args.base_model_id)
    if provenance.warning and accelerator.is_main_process:  # before the run: it may be stopped and given the id
        logger.warning(provenance.warning)
    return model, tokenizer, provenance


def sketch(args: SketchJobOptions, accelerator=None) -> Signature:
    """Sketch ``args.data`` under ``args.model`` with every process of ``accelerator``; see the module doc.
    The checkpoint folder, the data source and a ``like`` signature are checked before the model is loaded;
    nothing but checkpoints is written.

    Args:
        args (`SketchJobOptions`):
            Data, model, spec and run options (the ``fisherhub sketch`` flags).
        accelerator (`accelerate.Accelerator`, *optional*):
            The processes to sketch with (default: one made for ``args.cpu``).

    Returns:
        `Signature`: the signature of all the processes' documents, on every process.

    Raises:
        `InputError`: a data source, model, ``like`` signature or checkpoint folder that cannot be used.
        `TooFewDocumentsError`: too few documents to resolve a split-sample norm.
    """
    from fisherhub.hub import load_signature

    if args.checkpoint:
        check_checkpoint_folder(args.checkpoint, resume=args.resume)
    source = load_source(args.data)
    like = load_signature(args.like) if args.like else None
    accelerator = accelerator or make_accelerator(args.cpu)
    if args.device_map is not None and accelerator.num_processes > 1:
        raise InputError(
            f"device_map={args.device_map!r} spreads one model over the devices of one process, but this run has "
            f"{accelerator.num_processes} processes (each loads its own copy on its own device): run one process "
            "(fisherhub sketch --device-map auto ...) for a model that does not fit one device, or drop --device-map"
        )
    model, tokenizer, provenance = _load_model(args, like, accelerator)
    head = HeadModel.of(model, tokenizer)
    data = within_model_context(args.data, model)
    metadata = _metadata(data, source, provenance.as_metadata())
    stream = DocumentStream(data, tokenizer, accelerator.process_index, accelerator.num_processes, source=source)
    spec = main_process_reflection(accelerator, spec_for_model(head, tokenizer, args.spec_options(), like=like))
    checkpointer = None
    if args.checkpoint:
        key = _run_key(args, spec, accelerator.num_processes, stream.fingerprint)
        checkpointer = Checkpointer(
            args.checkpoint, accelerator.process_index, accelerator.num_processes, key, args.checkpoint_every
        )
    if args.resume:
        assert checkpointer is not None  # RunOptions refuses --resume without --checkpoint
        state, progress = checkpointer.load(spec, head.device)
    else:
        state, progress = SketchState(spec, device=head.device), Progress()
    if stream.reads_own_shards:
        progress.own_shard_sizes = progress.own_shard_sizes or stream.count_own_shards()
        stream.shard_sizes = all_shard_sizes(accelerator, stream, progress.own_shard_sizes)
    _run_batches(
        stream,
        [state],
        capture([state], head, token_chunk_size=args.token_chunk_size),
        progress,
        batch_size=args.batch_size,
        checkpointer=checkpointer,
        show_progress=args.progress and accelerator.is_main_process,
        description=f"sketching ({accelerator.num_processes} process{'es' if accelerator.num_processes > 1 else ''})",
    )
    if checkpointer is not None:
        checkpointer.save(state, progress)
    totals = reduce_totals(accelerator, state, progress.counts)
    check_has_documents(totals.seen, totals.too_short, data, state.document_counts.tolist())
    return state.finalize(metadata)
