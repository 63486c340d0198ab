"""Network-level signatures of a suite's tasks (SPEC §2b): one forward and one backward pass of the model per
batch (``fisherhub.lm.network``), from its top layers on cached lower-layer states where only those are sketched."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from benchmarks.paper import common
from fisherhub import Signature
from fisherhub.core.state import NetworkSketchState
from fisherhub.lm.network import sketch_network_batch
from fisherhub.lm.specs import network_spec_for_model

#: m of the network sketches: a quarter of the head's, because their projections (four per module and
#: position) make them the slowest part of every suite on 2 shared CPU cores (measured: 32 s per batch of 8
#: prompts for the 20 LoRA modules at m = 4096)
NETWORK_M = 1024
#: module sets of the network-level signatures, name → (modules, m), fixed before any result: the adapters'
#: targets and all linear modules at ``NETWORK_M``; the adapters' targets at the head's m (issue 27: at m = 1,024
#: exp. 4's network-level A separated no candidate)
NETWORK_SETS = {"lora": ("lora", NETWORK_M), "all_linear": ("all-linear", NETWORK_M), "lora_m4096": ("lora", 4096)}
#: the module sets each suite sketches (the first is the one ``auto`` reads); others: "lora" only
SUITE_NETWORK_SETS = {"exp4": ("lora", "lora_m4096")}


#: granularity of the network sketches per suite, fixed before any result: a verbalizer task has one scored
#: token per prompt, so its exact (sequence) gradient is the per-example one; LM domains use position granularity
GRANULARITY = {"exp3": "sequence", "exp4": "token", "exp5": "token", "exp6": "token", "exp7": "token"}
#: the ground truth's cache group of the lower-layer states (exp. 3: one for all tasks; else the domain's name)
PREFIX_GROUP = {"exp3": "verbalizer"}


class _PrefixEmbedding(torch.nn.Module):
    """Stands in for the input embeddings of the model cut to its top layers: row r of a batch gets its example's
    cached lower-layer states (left-padded as ``common.collate``; its last position feeds no scored prediction
    and gets zeros). ``weight`` is the real embedding matrix (the capture reads its device)."""

    def __init__(self, embeddings: torch.nn.Embedding):
        super().__init__()
        self.weight = embeddings.weight
        self.rows: list[torch.Tensor] = []

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = torch.zeros(*input_ids.shape, self.weight.shape[1])
        width = input_ids.shape[1]
        for row, states in enumerate(self.rows):
            hidden[row, width - len(states) - 1 : width - 1] = states
        return hidden


class _ScoredHead(torch.nn.Module):
    """Stands in for the LM head: logits at the scored positions (``mask``, set before each batch), zeros
    elsewhere. The loss reads only those, so its gradients are the real head's, at a fraction of the cost
    when few positions are scored (one per prompt in exp. 3)."""

    def __init__(self, head: torch.nn.Module):
        super().__init__()
        self.head = head
        self.weight = head.weight
        self.mask: torch.Tensor | None = None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden[self.mask])
        return torch.zeros(*hidden.shape[:2], logits.shape[-1], dtype=logits.dtype).index_put((self.mask,), logits)


def scored_mask(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """(B, T): positions whose next token is scored (HF ``labels`` convention)."""
    mask = torch.zeros_like(batch["labels"], dtype=torch.bool)
    mask[:, :-1] = batch["labels"][:, 1:] != common.IGNORE_INDEX
    return mask


class _PassThrough(torch.nn.Module):
    """A decoder layer that returns its input (the layers below the cached states)."""

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


@contextlib.contextmanager
def top_layers(model, first_layer: int):
    """``model`` running its layers ≥ ``first_layer`` only, on cached lower-layer states, and its head at the
    scored positions only (yields the two stand-ins; ``network_signature`` sets them per batch); the layers
    below pass their input through. Module names stay the
    full model's, and so do the gradients of modules in the top layers (the layers below do not depend on
    them), so network specs and signatures are those of the full model."""
    decoder = model.get_decoder()
    embeddings, layers, head = decoder.embed_tokens, decoder.layers, model.lm_head
    stand_in = _PrefixEmbedding(embeddings)
    decoder.embed_tokens, model.lm_head = stand_in, _ScoredHead(head)
    decoder.layers = torch.nn.ModuleList([_PassThrough() for _ in range(first_layer)] + list(layers)[first_layer:])
    try:
        yield stand_in, model.lm_head
    finally:
        decoder.embed_tokens, decoder.layers, model.lm_head = embeddings, layers, head


def network_spec(model, tokenizer, module_set: str, lora: common.LoraSettings, granularity: str):
    """The network spec of a module set (``NETWORK_SETS``: its modules, "lora" the adapters' targets in the top
    layers, and its m), the head's seed."""
    kind, m = NETWORK_SETS[module_set]
    if kind == "lora":
        modules = [
            f"model.layers.{layer}.self_attn.{target}"
            for layer in range(lora.first_layer, len(model.get_decoder().layers))
            for target in lora.target_modules
        ]
    else:
        modules = "all-linear"
    return network_spec_for_model(
        model, tokenizer, modules=modules, m=m, seed=common.SKETCH_SEED, granularity=granularity
    )


def network_signature(
    spec,
    model,
    examples: Sequence[common.Example],
    name: str,
    cache: Path,
    batch_size: int = 8,
    prefix: Mapping[str, torch.Tensor] | None = None,
    stand_in=None,
) -> Signature:
    """The network signature of a task's examples (one forward + backward per batch; cached under ``cache``).
    With ``prefix`` (``common.prefix_states``) the model runs inside ``top_layers`` and ``stand_in`` is what
    that yields (the embedding and head stand-ins)."""
    path = cache / spec.sketch_id / f"{name}.sig"
    if path.exists():
        return Signature.load(path)
    state = NetworkSketchState(spec)
    for start in tqdm(range(0, len(examples), batch_size), desc=f"network {name}", leave=False):
        chunk = examples[start : start + batch_size]
        batch = common.collate(chunk)
        if stand_in is not None:
            embeddings, head = stand_in
            embeddings.rows = [prefix[common.prefix_key(e)] for e in chunk]
            head.mask = scored_mask(batch)
        sketch_network_batch([state], model, batch)
    signature = state.finalize(common.provenance(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    signature.save(path)
    return signature


def suite_network_signatures(
    suite: str, module_set: str, tokenizer, tasks: Mapping[str, Sequence[common.Example]]
) -> list:
    """One network signature per task of ``suite`` (``tasks``: name → examples) over ``module_set``, from a fresh
    base model (no adapters). The model runs from the lowest sketched layer up (for "lora" the top layers, on
    the lower-layer states cached by the ground truth, computed here when missing) and its head at the scored
    positions only (``top_layers``)."""
    cache = common.SETUP.cache_dir / "network"
    model, _ = common.load_base_model()
    lora = common.lora_settings()
    first_layer = lora.first_layer if NETWORK_SETS[module_set][0] == "lora" else 0
    spec = network_spec(model, tokenizer, module_set, lora, GRANULARITY[suite])
    signatures = []
    for name, examples in tasks.items():
        group = PREFIX_GROUP.get(suite, name)
        prefix = common.prefix_states(
            model.get_decoder(),
            first_layer,
            examples,
            common.SETUP.cache_dir / f"prefix-L{first_layer}" / f"{group}.safetensors",
        )
        with top_layers(model, first_layer) as stand_in:
            signatures.append(
                network_signature(
                    spec, model, examples, f"{suite}-{name.replace('/', '-')}", cache, prefix=prefix, stand_in=stand_in
                )
            )
    return signatures
