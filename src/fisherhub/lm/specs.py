"""The sketch spec for a model: d, K and the fingerprint from its head, and the Householder reflection on the
mean head input over the embedded probe documents (the pilot mean); or, for a network signature (SPEC §2b),
the chosen linear modules (``lm.modules``)."""

from __future__ import annotations

import dataclasses

import torch

from fisherhub.core.errors import InputError
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.lm.capture import forward
from fisherhub.lm.head import HeadModel, non_finite_model_error
from fisherhub.lm.modules import linear_modules, module_shape, spec_modules
from fisherhub.lm.positions import max_positions, scored_positions
from fisherhub.lm.probe_text import PROBE_DOCUMENTS
from fisherhub.options import SpecOptions

#: probe documents are truncated to this many tokens for the pilot mean (fewer if the model takes fewer).
PROBE_MAX_TOKENS = 256


def pilot_mean(model: torch.nn.Module | HeadModel, tokenizer) -> torch.Tensor:
    """Mean head input a over the scored tokens of the embedded probe documents, float32 (d,). The forward
    passes stop at the head's input, so the head (K × d, the largest GEMM of a big-vocabulary model) never runs."""
    head = HeadModel.of(model, tokenizer)
    total, count = torch.zeros(head.d, dtype=torch.float64), 0
    max_tokens = min(PROBE_MAX_TOKENS, max_positions(head.base) or PROBE_MAX_TOKENS)
    for text in PROBE_DOCUMENTS:
        input_ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_tokens)["input_ids"]
        scored = scored_positions({"input_ids": input_ids})
        if len(scored):
            activations = forward(head, input_ids, torch.ones_like(input_ids), inputs_only=True)[0]
            total += activations[scored.rows, scored.positions].double().sum(dim=0).cpu()
            count += len(scored)
    if count == 0:
        raise InputError("the tokenizer turned every probe document into fewer than 2 tokens")
    if not torch.isfinite(total).all():
        raise non_finite_model_error("head inputs", head.weight.dtype)
    return (total / count).float()


def check_same_base_model(like: Signature, head: HeadModel, tokenizer=None) -> None:
    """Refuse sketching ``like`` a signature of another head (checksum, K × d) or tokenizer."""
    spec, named = like.spec, like.metadata.get("base_model", "unknown")
    fingerprint = head.fingerprint(tokenizer)
    theirs = spec.model_fingerprint
    if (spec.vocab_size, spec.d) != (head.vocab_size, head.d) or (
        theirs and theirs.head_checksum != fingerprint.head_checksum
    ):
        precision = ""
        if not head.checksum_as_stored:
            precision = (
                f". This model's head is {str(head.weight.dtype).removeprefix('torch.')} and its stored weights could "
                "not be read (from safetensors files it was loaded from) to compare them as stored: if it is the same "
                "model, sketch with --dtype float32 (dtype=torch.float32), or load it from its files"
            )
        raise InputError(
            f"signature made with another base model (head checksum {theirs.head_checksum if theirs else None} "
            f"vs {fingerprint.head_checksum}; head K×d {spec.vocab_size}×{spec.d} vs {head.vocab_size}×{head.d}): "
            f"sketch with its base model ({named}) to compare with it{precision}"
        )
    if theirs and theirs.tokenizer_checksum and fingerprint.tokenizer_checksum not in (None, theirs.tokenizer_checksum):
        raise InputError(
            f"signature made with another tokenizer (tokenizer checksum {theirs.tokenizer_checksum} vs "
            f"{fingerprint.tokenizer_checksum}): use the tokenizer of its base model ({named})"
        )


def check_spec_head(spec: SketchSpec, head: HeadModel) -> None:
    """Refuse a spec whose head checksum is not the model's (a spec made for another base model), or a network
    spec whose modules the model lacks."""
    if spec.modules is not None:
        spec_modules(spec, head.model)
    if spec.model_fingerprint is not None and spec.model_fingerprint.head_checksum != head.head_checksum:
        raise InputError(
            f"the spec is for another base model (head checksum {spec.model_fingerprint.head_checksum} vs "
            f"{head.head_checksum}); make it for this model (spec_for_model / network_spec_for_model)"
        )


def spec_for_model(
    model: torch.nn.Module | HeadModel,
    tokenizer=None,
    options: SpecOptions | None = None,
    *,
    like: Signature | None = None,
    **spec_options,
) -> SketchSpec:
    """The sketch spec for ``model``: d, K and the fingerprint from its head, the options, and the Householder
    reflection on ``pilot_mean`` (computed on the embedded probe documents, so it needs the tokenizer). With
    ``modules`` or ``adapters`` it is a network spec (SPEC §2b): the chosen linear modules as (name,
    in_features, out_features) in model order, and the ``kernel``; no reflection.

    ``reflection``: None uses it whenever the tokenizer is given; True requires it; False goes without. It
    cuts the standard error of A by about half (benchmarks/README.md). Only its use enters the sketch id:
    signatures whose pilot directions agree within ``core.spec.REFLECTION_TOLERANCE`` compare
    (``SketchSpec.compatible_with``), so pilots computed on other devices in float32 are fine; a pilot from a
    bfloat16 run may not be: sketch ``like=``.

    Args:
        model (`torch.nn.Module` or `HeadModel`):
            A ``transformers`` causal LM.
        tokenizer (`PreTrainedTokenizerBase`, *optional*):
            Its tokenizer (for the reflection and the tokenizer checksum).
        options (`SpecOptions`, *optional*):
            m, seed, estimator, granularity, Fisher type, reflection, error space ("head-input": (a, δ = Wᵀe),
            SPEC §2b), modules / adapters and kernel (defaults in ``SpecOptions``).
        like (`Signature`, *optional*):
            Return this signature's own spec (``options`` are ignored) once the model's head checksum (and
            tokenizer checksum, when both are known) match the signature's.
        **spec_options:
            The fields of ``SpecOptions`` as keywords, instead of ``options``.

    Returns:
        `SketchSpec`: the spec (head or network).

    Raises:
        `InputError`: both ``options`` and keywords, a ``like`` that is not a Signature or is of another model,
            options ``SpecOptions`` refuses, a reflection asked for without a tokenizer.
    """
    head = HeadModel.of(model, tokenizer)
    if like is not None:
        if not isinstance(like, Signature):
            raise InputError(f"like= takes a Signature, got {type(like).__name__}; load it with Signature.load(path)")
        check_same_base_model(like, head, tokenizer)
        check_spec_head(like.spec, head)
        return like.spec
    if options is not None and spec_options:
        raise InputError("pass either options= (a SpecOptions) or its fields as keywords, not both")
    options = options or SpecOptions(**spec_options)
    spec = SketchSpec(
        d=head.d,
        vocab_size=head.vocab_size,
        m=options.m,
        seed=options.seed,
        estimator=options.estimator,
        granularity=options.granularity,
        fisher=options.fisher,
        model_fingerprint=head.fingerprint(tokenizer),
        error_space=options.error_space,
    )
    if options.is_network:
        selected = linear_modules(head.model, options.modules, adapters=options.adapters)
        modules = tuple((name, *module_shape(module)) for name, module in selected)
        return dataclasses.replace(spec, modules=modules, kernel=options.kernel)
    reflection = tokenizer is not None if options.reflection is None else options.reflection
    if not reflection:
        return spec
    if tokenizer is None:
        raise InputError(
            "reflection=True computes the pilot mean on a probe text: pass the tokenizer, or reflection=False"
        )
    return spec.with_reflection(pilot_mean(head, tokenizer))


def network_spec_for_model(model: torch.nn.Module | HeadModel, tokenizer=None, **spec_options) -> SketchSpec:
    """``spec_for_model`` of a network signature: ``modules=`` ("all-linear" or names / suffixes) or ``adapters=``
    (LoRA adapters whose target modules to take) is required; the other ``SpecOptions`` fields as keywords
    (``granularity="token"`` is position granularity)."""
    options = SpecOptions(**spec_options)
    if not options.is_network:
        raise InputError(
            "name the modules to sketch: modules='all-linear' or a list of names, or adapters=[...] (one of the two)"
        )
    return spec_for_model(model, tokenizer, options)
