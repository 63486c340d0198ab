"""Shared pieces of the paper-reproduction experiments on SmolLM2-135M-Instruct (CPU, offline).

Model loading, documents → examples (Hugging Face ``labels`` convention), per-token head inputs a and
labels y captured with ``fisherhub.lm.capture`` (the errors e = softmax(W a) − onehot(y) are recomputed
from them in float32 when needed, so the cache holds N×d floats instead of N×K), signatures, LoRA
training with PEFT and scored-token losses. Everything expensive is cached under
``benchmarks/.cache/paper/`` (git-ignored; ``FISHERHUB_BENCHMARK_CACHE`` moves it) and every experiment resumes from what is there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from benchmarks import domains

from fisherhub.core.batch import HeadBatch
from fisherhub import Signature, SketchSpec, SketchState
from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.lm import head_batches, spec_for_model
from fisherhub.lm.head import output_head
from fisherhub.lm.loading import DEFAULT_MODEL_ID, load_model_and_tokenizer
from fisherhub.core.errors import InputError

BENCHMARKS_DIR = Path(__file__).resolve().parents[1]
CACHE_DIR = domains.CACHE_DIR / "paper"  # FISHERHUB_BENCHMARK_CACHE moves it, with the domains
RESULTS_DIR = BENCHMARKS_DIR / "results"
#: the sketch is fixed before any transfer number is looked at: m = 4096, default estimator, seed 0.
SKETCH_M, SKETCH_SEED = 4096, 0
#: ``--quick``: m of the tiny model's sketches, and the tiny model (a random Llama, character tokenizer)
QUICK_SKETCH_M, QUICK_VOCAB, QUICK_LAYERS = 256, 96, 3
#: ``--quick``: how many of a suite's domains it runs on
QUICK_DOMAINS = 5


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a paper suite runs on and where it keeps things: the full run (SmolLM2-135M, its cache under
    benchmarks/.cache/paper/, results in benchmarks/results/) or ``quick`` (a tiny random Llama on tiny
    random domains, cache and results in ``results_dir``: seconds, the code paths only)."""

    quick: bool = False
    cache_dir: Path = CACHE_DIR
    results_dir: Path = RESULTS_DIR
    #: a causal LM folder or id to run on instead of the embedded default (``--model``)
    model: str | None = None


#: the setup of this process's suite (``paper_arguments`` sets it from the command line)
SETUP = Setup()


def paper_arguments(description: str, official: bool = False, argv: Sequence[str] | None = None):
    """A paper suite's command line: ``--quick``, ``--output-dir`` and, where ``official``, ``--no-official``
    (the official package's interpreter is checked here, before the run); sets ``SETUP``. Returns the options,
    with ``official_package`` (False in a quick run)."""
    import argparse
    import tempfile

    global SETUP
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="seconds: a tiny random model on tiny random domains, results in a temp folder",
    )
    parser.add_argument("--output-dir", type=Path, help=f"where the JSON and PNG go (default {RESULTS_DIR})")
    parser.add_argument(
        "--model",
        default=None,
        help="a causal LM folder or id instead of SmolLM2-135M-Instruct; its cache and (unless --output-dir) its "
        f"results go to folders of their own: {CACHE_DIR}/models/NAME and {RESULTS_DIR}/models/NAME",
    )
    if official:
        parser.add_argument(
            "--no-official",
            action="store_true",
            help="leave out the official fishersketch package (about 0.2 s per token on one CPU thread)",
        )
    options = parser.parse_args(argv)
    options.official_package = official and not options.quick and not options.no_official
    if options.official_package:
        from benchmarks.paper.official import official_python

        official_python()
    if options.quick:
        if options.model:
            parser.error("--quick runs on a tiny random model: leave out --model")
        folder = options.output_dir or Path(tempfile.mkdtemp(prefix="fisherhub-paper-quick-"))
        SETUP = Setup(True, folder / "cache", folder)
    elif options.model:
        name = Path(options.model).name
        SETUP = Setup(
            False, CACHE_DIR / "models" / name, options.output_dir or RESULTS_DIR / "models" / name, options.model
        )
    elif options.output_dir:
        SETUP = Setup(False, CACHE_DIR, options.output_dir)
    return options


# -- model -----------------------------------------------------------------------------------------
def load_base_model():
    """SmolLM2-135M-Instruct, or ``SETUP.model`` (float32, eval mode, frozen), and its tokenizer; a tiny random
    Llama if quick."""
    if SETUP.quick:
        from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

        model = tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=QUICK_VOCAB, num_layers=QUICK_LAYERS)
        tokenizer = tiny_tokenizer(QUICK_VOCAB)
    else:
        model, tokenizer = load_model_and_tokenizer(SETUP.model)
    model.requires_grad_(False)
    return model, tokenizer


def adapter_pass_share() -> float:
    """What one document under a suite's adapter (``lora_settings``: layers ``first_layer`` … adapted) costs in full
    passes of the base model, the layers below replayed: ``fisherhub.lm.modules.pass_share``, as ``select_adapter``
    counts it (the model built on the meta device: no weights read)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from fisherhub.lm.loading import default_model_folder
    from fisherhub.lm.modules import pass_share

    if SETUP.quick:
        return pass_share(load_base_model()[0], lora_settings().first_layer)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(SETUP.model or default_model_folder()))
    return pass_share(model, lora_settings().first_layer)


def base_model_id() -> str:
    """The base model a suite's signatures name: ``SETUP.model``, else the embedded default's id."""
    return SETUP.model or DEFAULT_MODEL_ID


def model_name() -> str:
    """The name of the model a suite runs on, for titles and descriptions."""
    return "a tiny random Llama" if SETUP.quick else Path(base_model_id()).name


def paper_spec(model, tokenizer) -> SketchSpec:
    """The library's default spec for the model (m=4096, seed 0, default estimator and reflection)."""
    return spec_for_model(
        model, tokenizer, m=QUICK_SKETCH_M if SETUP.quick else SKETCH_M, seed=SKETCH_SEED, reflection=True
    )


def quick_texts(names: Sequence[str], documents: int = 40, length: int = 40) -> dict[str, list[str]]:
    """Tiny random domains (quick runs): domain k's documents draw characters from its own window of the
    tiny tokenizer's alphabet, windows of neighbouring domains overlapping."""
    from fisherhub.testing.tiny_models import ALPHABET

    generator = random.Random(0)
    width = 12
    return {
        name: [
            "".join(generator.choice(ALPHABET[4 * k : 4 * k + width]) for _ in range(length)) for _ in range(documents)
        ]
        for k, name in enumerate(names)
    }


#: the twelve natural domains of experiments 1, 2 and 4 (``benchmarks/domains.py`` names), fixed in advance
NATURAL_DOMAINS = (
    "kjv_prose",
    "shakespeare",
    "poetry",
    "science_fortunes",
    "python_docs",
    "python_code",
    "license_texts",
    "smiles_moses",
    "protein_uniprot",
    "dna_genome",
    "movie_reviews",
    "tweets",
)


# -- examples --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Example:
    """One document: token ids, HF-convention labels (−100 = unscored) and its global index."""

    input_ids: tuple[int, ...]
    labels: tuple[int, ...]
    doc_index: int

    @property
    def num_scored(self) -> int:
        return sum(label != IGNORE_INDEX for label in self.labels[1:])


def lm_examples(
    tokenizer, texts: Sequence[str], max_tokens: int, scored_budget: int | None = None, first_doc_index: int = 0
) -> list[Example]:
    """Language-modelling documents of at most ``max_tokens`` tokens, every next token scored.

    With ``scored_budget`` documents are taken in order until exactly that many tokens are scored
    (the last one is cut short).
    """
    examples, scored = [], 0
    for offset, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False, truncation=True, max_length=max_tokens)["input_ids"]
        if scored_budget is not None:
            ids = ids[: scored_budget - scored + 1]
        if len(ids) < 2:
            continue
        examples.append(Example(tuple(ids), tuple(ids), first_doc_index + offset))
        scored += len(ids) - 1
        if scored_budget is not None and scored >= scored_budget:
            break
    return examples


def domain_texts(names: Sequence[str], load: Callable[[], Mapping[str, Mapping]]) -> dict[str, list[str]]:
    """The documents of the named domains: ``load()[name]["text"]`` (``benchmarks.domains``), or
    ``quick_texts`` of the first ``QUICK_DOMAINS`` in a quick run (nothing is built or read)."""
    if SETUP.quick:
        return quick_texts(names[:QUICK_DOMAINS])
    domains = load()
    return {name: domains[name]["text"] for name in names}


@dataclasses.dataclass(frozen=True)
class DomainSplit:
    """A domain's task data (signature and LoRA training: the first ``scored_tokens`` tokens of documents
    cut to ``max_tokens``) and its held-out documents (perplexity: the next documents, cut the same way,
    until exactly ``eval_tokens`` tokens are scored)."""

    max_tokens: int = 64
    scored_tokens: int = 2000
    eval_tokens: int = 1024

    def split(self, tokenizer, texts: Sequence[str]) -> tuple[list[Example], list[Example]]:
        task = lm_examples(tokenizer, texts, self.max_tokens, scored_budget=self.scored_tokens)
        rest = task[-1].doc_index + 1
        held_out = lm_examples(
            tokenizer, texts[rest:], self.max_tokens, scored_budget=self.eval_tokens, first_doc_index=rest
        )
        if sum(e.num_scored for e in held_out) < self.eval_tokens:
            raise InputError(
                f"{len(texts)} documents leave fewer than {self.eval_tokens} held-out tokens "
                "after the task data; build the domain with more documents"
            )
        return task, held_out


def domain_split() -> DomainSplit:
    """The split of every domain: ``DomainSplit()``, or 24 task and 8 held-out documents of 6 tokens if quick
    (a signature needs 20 documents)."""
    return DomainSplit(max_tokens=6, scored_tokens=120, eval_tokens=40) if SETUP.quick else DomainSplit()


def label_example(tokenizer, prompt: str, label_id: int, doc_index: int) -> Example:
    """``prompt`` followed by one scored label token."""
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return Example(tuple(ids) + (label_id,), (IGNORE_INDEX,) * len(ids) + (label_id,), doc_index)


def examples_key(examples: Sequence[Example]) -> str:
    """Short hash of the examples' tokens (cache keys that change when the data does)."""
    return hashlib.sha256(json.dumps([[e.input_ids, e.labels] for e in examples]).encode()).hexdigest()[:10]


def collate(examples: Sequence[Example], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Left-padded batch: input_ids, attention_mask, labels (−100 on padding), doc_index."""
    width = max(len(e.input_ids) for e in examples)
    batch = {
        key: torch.full((len(examples), width), fill, dtype=torch.long)
        for key, fill in (("input_ids", pad_id), ("attention_mask", 0), ("labels", IGNORE_INDEX))
    }
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        batch["input_ids"][row, width - n :] = torch.tensor(example.input_ids)
        batch["attention_mask"][row, width - n :] = 1
        batch["labels"][row, width - n :] = torch.tensor(example.labels)
    batch["doc_index"] = torch.tensor([e.doc_index for e in examples], dtype=torch.long)
    return batch


def batches(examples: Sequence[Example], batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    for start in range(0, len(examples), batch_size):
        yield collate(examples[start : start + batch_size])


# -- head inputs, errors, signatures ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class HeadInputs:
    """Scored tokens of a task: head inputs a (N, d) float32, labels y (N,), global doc indices (N,)."""

    activations: torch.Tensor
    targets: torch.Tensor
    doc_index: torch.Tensor

    def __len__(self) -> int:
        return len(self.targets)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({f.name: getattr(self, f.name).contiguous() for f in dataclasses.fields(self)}, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)

    @classmethod
    def load(cls, path: Path) -> HeadInputs:
        return cls(**load_file(path))

    def select(self, keep: torch.Tensor) -> HeadInputs:
        return HeadInputs(self.activations[keep], self.targets[keep], self.doc_index[keep])


def head_errors(model, activations: torch.Tensor, targets: torch.Tensor, chunk_size: int = 512) -> torch.Tensor:
    """e = softmax(head(a)) − onehot(y) in float32, (N, K) (SmolLM2 has a plain tied head)."""
    head = output_head(model)
    chunks = []
    with torch.no_grad():
        for start in range(0, len(targets), chunk_size):
            errors = torch.softmax(head(activations[start : start + chunk_size]).float(), dim=-1)
            errors[torch.arange(len(errors)), targets[start : start + chunk_size]] -= 1.0
            chunks.append(errors)
    return torch.cat(chunks)


def cached_errors(model, inputs: HeadInputs, path: Path) -> torch.Tensor:
    """``head_errors`` of a task, kept as a float32 .npy file (N×K×4 bytes) for reuse."""
    if path.exists():
        return torch.from_numpy(np.load(path))
    errors = head_errors(model, inputs.activations, inputs.targets)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.tmp", "wb") as handle:
        np.save(handle, errors.numpy())
    os.replace(f"{path}.tmp", path)
    return errors


def capture_task(
    model, spec: SketchSpec, examples: Sequence[Example], name: str, cache: Path, batch_size: int = 8
) -> tuple[HeadInputs, Signature]:
    """Head inputs and the signature of a task (cached under ``cache``).

    Both come from one forward pass; a cached task whose signature is missing (another spec) is
    sketched from its cached head inputs.
    """
    inputs_path, signature_path = cache / f"{name}.inputs.safetensors", cache / spec.sketch_id / f"{name}.sig"
    if signature_path.exists():
        return HeadInputs.load(inputs_path), Signature.load(signature_path)
    if inputs_path.exists():
        inputs = HeadInputs.load(inputs_path)
        signature = sketch_head_inputs(spec, model, inputs, name)
    else:
        state, parts = SketchState(spec), []
        for batch in tqdm(list(batches(examples, batch_size)), desc=f"capture {name}", leave=False):
            for chunk in head_batches(model, batch, fisher=spec.fisher, seed=spec.seed, materialize_errors=True):
                state.update(chunk)
                parts.append((chunk.activations, chunk.targets, chunk.doc_index))
            state.flush()
        inputs = HeadInputs(*(torch.cat(column) for column in zip(*parts)))
        signature = state.finalize(provenance(name))
        inputs.save(inputs_path)
    signature_path.parent.mkdir(parents=True, exist_ok=True)
    signature.save(signature_path)
    return inputs, signature


def provenance(name: str) -> dict[str, str]:
    """The metadata of a suite's signature of task ``name``."""
    return {"base_model": base_model_id(), "dataset": name}


@dataclasses.dataclass
class CapturedDomains:
    """Per domain (in order): task examples, held-out examples, head inputs and signature."""

    names: list[str]
    task_examples: dict[str, list[Example]]
    eval_examples: dict[str, list[Example]]
    inputs: list[HeadInputs]
    signatures: list[Signature]


def capture_domains(
    model, tokenizer, spec: SketchSpec, texts: Mapping[str, Sequence[str]], split: DomainSplit
) -> CapturedDomains:
    """Split every domain's documents and capture its task data (cached under ``tasks/``)."""
    captured = CapturedDomains(list(texts), {}, {}, [], [])
    for name in tqdm(captured.names, desc="capture"):
        task, held_out = split.split(tokenizer, texts[name])
        inputs, signature = capture_task(model, spec, task, name, SETUP.cache_dir / "tasks")
        captured.task_examples[name], captured.eval_examples[name] = task, held_out
        captured.inputs.append(inputs)
        captured.signatures.append(signature)
    return captured


def sketch_head_inputs(spec: SketchSpec, model, inputs: HeadInputs, name: str, chunk_size: int = 512) -> Signature:
    """Signature of (a, e) pairs already in memory (e recomputed from a and y)."""
    state = SketchState(spec)
    for start in range(0, len(inputs), chunk_size):
        part = inputs.select(slice(start, start + chunk_size))
        state.update(
            HeadBatch(
                activations=part.activations,
                doc_index=part.doc_index,
                errors=head_errors(model, part.activations, part.targets),
            )
        )
    state.flush()
    return state.finalize(provenance(name))


# -- exact Gram form ---------------------------------------------------------------------------------
def gram_kernels(
    a_i: torch.Tensor, e_i: torch.Tensor, a_j: torch.Tensor, e_j: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(a_t·a_s)² and (e_t·e_s)² for every token pair, float64 (n_i, n_j).

    e·e' is one float32 BLAS product over K (relative error ~1e-6; checked against the float64
    ``fisherhub.core.exact.gram_inner_products`` by experiment 1), a·a' is float64.
    """
    activation = (a_i.double() @ a_j.double().T) ** 2
    error = (e_i @ e_j.T).double() ** 2
    return activation, error


def kernel_means(activation: torch.Tensor, error: torch.Tensor, mask: torch.Tensor | None = None) -> list[float]:
    """[⟨F_i,F_j⟩, ⟨M_i,M_j⟩, ⟨Γ_i,Γ_j⟩] as means of the kernels over the pairs in ``mask`` (all if None)."""
    mask = torch.ones_like(activation, dtype=torch.bool) if mask is None else mask
    count = mask.sum()
    return [
        float((activation * error)[mask].sum() / count),
        float(activation[mask].sum() / count),
        float(error[mask].sum() / count),
    ]


def self_pair_masks(doc_index: torch.Tensor) -> dict[str, torch.Tensor]:
    """Token-pair masks of a task with itself: every pair ("plugin"), t ≠ s ("u_statistic"), and
    t, s in different split halves (doc index parity), which is what the sketch's norm estimates ("split")."""
    n = len(doc_index)
    halves = doc_index % 2
    return {
        "plugin": torch.ones(n, n, dtype=torch.bool),
        "u_statistic": ~torch.eye(n, dtype=torch.bool),
        "split": halves[:, None] != halves[None, :],
    }


# -- LoRA on the top layers, over cached lower-layer states ---------------------------------------
@dataclasses.dataclass(frozen=True)
class LoraSettings:
    """LoRA (r, α on q_proj, v_proj of layers ≥ ``first_layer``: the top third of SmolLM2's 30) and its
    short AdamW run of ``steps`` batches of ``batch_size`` examples (constant learning rate)."""

    rank: int = 8
    alpha: int = 16
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    first_layer: int = 20
    steps: int = 16
    batch_size: int = 3
    learning_rate: float = 1e-3


def lora_settings() -> LoraSettings:
    """The adapters of every ground truth: ``LoraSettings()``, or 2 steps on the top layer if quick."""
    return LoraSettings(first_layer=QUICK_LAYERS - 1, steps=2, batch_size=2) if SETUP.quick else LoraSettings()


#: LoRA training seeds of every transfer experiment (each seed is one ground truth; selections are scored per seed)
LORA_SEEDS = (0, 1)


def config_key(*configs) -> str:
    """Short hash of dataclass configurations (cache file names)."""
    payload = [(type(c).__name__, dataclasses.asdict(c)) for c in configs]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:10]


@contextlib.contextmanager
def decoder_slice(decoder, start: int, stop: int, final_norm: bool):
    """The decoder running only layers [start, stop) (and its final norm only if ``final_norm``)."""
    layers, norm = decoder.layers, decoder.norm
    decoder.layers = torch.nn.ModuleList(list(layers)[start:stop])
    if not final_norm:
        decoder.norm = torch.nn.Identity()
    try:
        yield decoder
    finally:
        decoder.layers, decoder.norm = layers, norm


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.cumsum(dim=1) - 1).clamp_min(0)


class LoraBench:
    """One PEFT wrapper around the base model, adapters only on the top layers.

    The layers below ``first_layer`` never change, so their output on each example is computed once
    and cached ("prefix states"); training and evaluation run the top layers and the head only, on
    scored positions. The last input token of an example never feeds a scored prediction, so the
    states cover ``input_ids[:-1]`` and examples that differ only in their label share them.
    """

    def __init__(self, model, settings: LoraSettings, cache: Path):
        from peft import LoraConfig, get_peft_model

        self.settings = settings
        self.cache = cache
        self.num_layers = len(model.get_decoder().layers)
        self.model = get_peft_model(
            model,
            LoraConfig(
                r=settings.rank,
                lora_alpha=settings.alpha,
                target_modules=list(settings.target_modules),
                layers_to_transform=list(range(settings.first_layer, self.num_layers)),
                lora_dropout=0.0,
            ),
        )
        self.model.eval()
        self.decoder = self.model.get_base_model().get_decoder()
        self._states: dict[str, torch.Tensor] = {}

    # -- prefix states ----------------------------------------------------------------------------
    def prefix_states(self, examples: Sequence[Example], group: str, batch_size: int = 8) -> None:
        """Compute (or load from ``group``'s cache file) the lower-layer states of ``examples``."""
        path = self.cache / f"prefix-L{self.settings.first_layer}" / f"{group}.safetensors"
        self._states.update(prefix_states(self.decoder, self.settings.first_layer, examples, path, batch_size))

    def scored_logits(self, examples: Sequence[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (N, K) and labels (N,) of the scored tokens of ``examples`` (prefix states needed)."""
        states = [self._states[prefix_key(e)] for e in examples]
        width = max(len(s) for s in states)
        hidden = torch.zeros(len(states), width, states[0].shape[1])
        mask = torch.zeros(len(states), width, dtype=torch.long)
        targets = torch.full((len(states), width), IGNORE_INDEX, dtype=torch.long)
        for row, (state, example) in enumerate(zip(states, examples)):
            hidden[row, width - len(state) :] = state
            mask[row, width - len(state) :] = 1
            targets[row, width - len(state) :] = torch.tensor(example.labels[1:])
        with decoder_slice(self.decoder, self.settings.first_layer, self.num_layers, final_norm=True):
            top = self.decoder(
                inputs_embeds=hidden, attention_mask=mask, position_ids=_positions(mask), use_cache=False
            ).last_hidden_state
        scored = targets != IGNORE_INDEX
        return output_head(self.model)(top[scored]).float(), targets[scored]

    def nll(
        self, examples: Sequence[Example], batch_size: int = 8, candidate_ids: Sequence[int] | None = None
    ) -> torch.Tensor:
        """−log p of each scored token's label (N,), or of each candidate token (N, C) when given."""
        rows = []
        with torch.no_grad():
            for start in range(0, len(examples), batch_size):
                logits, targets = self.scored_logits(examples[start : start + batch_size])
                log_probs = torch.log_softmax(logits, dim=-1)
                columns = targets[:, None] if candidate_ids is None else torch.tensor(candidate_ids)[None, :]
                rows.append(-log_probs.gather(1, columns.expand(len(targets), -1)))
        nll = torch.cat(rows)
        return nll[:, 0] if candidate_ids is None else nll

    def document_nll(self, examples: Sequence[Example]) -> list[float]:
        """Σ_t −log p(label_t) over each example's scored tokens (one sum per example, in order)."""
        return [float(part.sum()) for part in self.nll(examples).split([e.num_scored for e in examples])]

    # -- adapters ---------------------------------------------------------------------------------
    def adapter_path(self, name: str, examples: Sequence[Example], seed: int = 0, steps: int | None = None) -> Path:
        """Where the adapter trained on ``examples`` with ``seed`` (for ``steps``, default the settings') is cached."""
        settings = self.settings if steps is None else dataclasses.replace(self.settings, steps=steps)
        return self.cache / f"lora-{config_key(settings)}" / f"{name}.{examples_key(examples)}.seed{seed}.safetensors"

    def adapter(self, name: str, examples: Sequence[Example], seed: int = 0) -> dict[str, torch.Tensor]:
        """The adapter trained on ``examples`` with ``seed`` (loaded when cached)."""
        return self.adapters_at_steps(name, examples, seed, (self.settings.steps,))[self.settings.steps]

    def adapters_at_steps(
        self, name: str, examples: Sequence[Example], seed: int, steps: Sequence[int]
    ) -> dict[int, dict[str, torch.Tensor]]:
        """The adapters after each of ``steps`` of one run of max(steps) steps (loaded when all are cached), each
        cached where the run of that many steps caches its adapter: the first s steps of a longer run are the
        s-step run (the same batches, a constant learning rate)."""
        paths = {s: self.adapter_path(name, examples, seed, s) for s in steps}
        if all(path.exists() for path in paths.values()):
            return {s: load_file(path) for s, path in paths.items()}
        snapshots = self._train(examples, seed, f"LoRA {name} s{seed}", tuple(steps))
        for s, path in paths.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            save_file(snapshots[s], f"{path}.tmp")
            os.replace(f"{path}.tmp", path)
        return snapshots

    def _train(
        self, examples: Sequence[Example], seed: int, desc: str, keep: tuple[int, ...]
    ) -> dict[int, dict[str, torch.Tensor]]:
        """The LoRA weights after each step count in ``keep`` of one run of max(keep) steps."""
        from peft import get_peft_model_state_dict

        settings = dataclasses.replace(self.settings, steps=max(keep))
        torch.manual_seed(seed)
        for module in self.model.modules():
            if hasattr(module, "reset_lora_parameters"):
                module.reset_lora_parameters("default", True)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=settings.learning_rate, weight_decay=0.0)
        order = _epoch_order(len(examples), settings.steps * settings.batch_size, seed)
        self.model.train()
        snapshots = {}
        for step in tqdm(range(settings.steps), desc=desc, leave=False):
            chosen = order[step * settings.batch_size : (step + 1) * settings.batch_size]
            logits, targets = self.scored_logits([examples[i] for i in chosen])
            torch.nn.functional.cross_entropy(logits, targets).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step + 1 in keep:
                snapshots[step + 1] = {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model).items()}
        self.model.eval()
        return snapshots

    @contextlib.contextmanager
    def using(self, weights: dict[str, torch.Tensor] | None):
        """This bench with ``weights`` loaded, or with the adapter disabled (the base model) for ``None``."""
        from peft import set_peft_model_state_dict

        if weights is None:
            with self.model.disable_adapter():
                yield self
            return
        set_peft_model_state_dict(self.model, weights)
        yield self


def prefix_states(
    decoder, first_layer: int, examples: Sequence[Example], path: Path, batch_size: int = 8
) -> dict[str, torch.Tensor]:
    """The output of the decoder's layers below ``first_layer`` on each example's ``input_ids[:-1]`` (the last
    input token feeds no scored prediction), keyed by ``prefix_key``; loaded from and saved to ``path``."""
    states = load_file(path) if path.exists() else {}
    keys = {prefix_key(e): e for e in examples}
    missing = [e for k, e in keys.items() if k not in states]
    with torch.no_grad(), decoder_slice(decoder, 0, first_layer, final_norm=False):
        for start in tqdm(range(0, len(missing), batch_size), desc=f"prefix {path.stem}", leave=False):
            chunk = missing[start : start + batch_size]
            batch = collate([Example(e.input_ids[:-1], e.labels[:-1], e.doc_index) for e in chunk])
            mask = batch["attention_mask"]
            hidden = decoder(
                input_ids=batch["input_ids"], attention_mask=mask, position_ids=_positions(mask), use_cache=False
            ).last_hidden_state
            for row, example in enumerate(chunk):
                states[prefix_key(example)] = hidden[row, mask[row] == 1].clone()
    if missing or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in states.items()}, f"{path}.tmp")
        os.replace(f"{path}.tmp", path)
    return {k: states[k] for k in keys}


def prefix_key(example: Example) -> str:
    return hashlib.sha1(json.dumps(example.input_ids[:-1]).encode()).hexdigest()


def _epoch_order(population: int, count: int, seed: int) -> list[int]:
    """``count`` indices: shuffled passes over ``range(population)``."""
    rng, order = random.Random(seed), []
    while len(order) < count:
        epoch = list(range(population))
        rng.shuffle(epoch)
        order += epoch
    return order[:count]


# -- ledgers (resumable key → value JSON) ------------------------------------------------------------
class Ledger:
    """A JSON dict on disk, written after every new entry, so an interrupted run resumes."""

    def __init__(self, path: Path):
        self.path = path
        self.entries = json.loads(path.read_text()) if path.exists() else {}

    def get(self, key: str, compute):
        if key not in self.entries:
            self.entries[key] = compute()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.with_suffix(".tmp").write_text(json.dumps(self.entries, indent=1, sort_keys=True))
            os.replace(self.path.with_suffix(".tmp"), self.path)
        return self.entries[key]
