"""Model capture: a and e against autograd, alignments against exact forms, masks, dtypes, bad input.

Tiny random causal LMs from configs (fisherhub.testing.tiny_models), a character-level tokenizer, no downloads.
"""

from __future__ import annotations


import numpy as np
import peft
import pytest
import torch
import transformers
from fisherhub.testing.tiny_models import (
    code_documents,
    prose_documents,
    ARCHITECTURES,
    SCALED_ARCHITECTURES,
    SOFTCAPPED_ARCHITECTURES,
    tiny_causal_lm,
    tiny_tokenizer,
)

from fisherhub.core.batch import HeadBatch
from fisherhub import FisherHubError, InputError, SketchState, alignment
from fisherhub.lm import HeadModel, head_batches, pilot_mean, sketch_batch, spec_for_model
from fisherhub.lm.head import LogitTransform, output_head
from fisherhub.lm.positions import scored_positions
from fisherhub.core.hashing import uniforms
from fisherhub.core.hashing import Stream
from fisherhub.core.exact import materialized_fisher, sequence_gradients
from fisherhub.lm.probe_text import PROBE_DOCUMENTS

VOCAB_SIZE = 64
TOKENIZER = tiny_tokenizer(VOCAB_SIZE)


def encode(texts: list[str], first_document: int = 0, padding_side: str = "right") -> dict[str, torch.Tensor]:
    batch = dict(TOKENIZER(texts, padding=True, padding_side=padding_side, return_tensors="pt"))
    batch["doc_index"] = torch.arange(first_document, first_document + len(texts))
    return batch


def sketch_documents(model, spec, texts: list[str], batch_size: int = 8, **encode_options) -> SketchState:
    state = SketchState(spec)
    for start in range(0, len(texts), batch_size):
        sketch_batch(state, model, encode(texts[start : start + batch_size], start, **encode_options))
    return state


def assert_same_sums(state: SketchState, expected: SketchState) -> None:
    """Equal sums up to float32 rounding (relative to their scale) and equal counts."""
    scale = float(expected.sums.abs().max())
    torch.testing.assert_close(state.sums, expected.sums, rtol=1e-4, atol=1e-5 * scale)
    assert torch.equal(state.token_counts, expected.token_counts)
    assert torch.equal(state.document_counts, expected.document_counts)


def captured(model, batch, **options) -> dict[str, torch.Tensor]:
    """The concatenated chunks of ``head_batches`` with e materialized."""
    chunks = list(head_batches(model, batch, materialize_errors=True, **options))
    return {
        name: torch.cat([getattr(c, name) for c in chunks])
        for name in ("activations", "errors", "doc_index", "targets")
    }


def autograd_reference(model, batch, per_token_head_gradients: bool = False) -> dict[str, torch.Tensor]:
    """By autograd, at the scored positions (right-padded batches): the head input a, e = ∂(Σ_t CE_t)/∂z
    (z the head output), the model's logits, and optionally every token's ∂CE_t/∂W (untied heads only)."""
    head = model.get_output_embeddings()
    saved = {}

    def hook(module, args, output):
        output.retain_grad()
        saved["a"], saved["z"] = args[0], output

    handle = head.register_forward_hook(hook)
    try:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    finally:
        handle.remove()
    mask = batch["attention_mask"].bool()
    labels = batch.get("labels", batch["input_ids"])
    keep = (labels[:, 1:] != -100) & mask[:, :-1] & mask[:, 1:]
    rows, positions = keep.nonzero(as_tuple=True)
    token_logits, targets = logits[rows, positions], labels[:, 1:][rows, positions]
    losses = torch.nn.functional.cross_entropy(token_logits, targets, reduction="none")
    reference = {"targets": targets, "logits": token_logits.detach(), "doc_index": batch["doc_index"][rows]}
    model.zero_grad()
    losses.sum().backward(retain_graph=per_token_head_gradients)
    reference["a"], reference["e"] = saved["a"][rows, positions].detach(), saved["z"].grad[rows, positions].clone()
    reference["head_weight_gradient"] = head.weight.grad.clone()
    model.zero_grad()
    if per_token_head_gradients:
        one_loss_each = torch.eye(len(losses))  # row t selects ℓ_t: a batch of N backward passes
        reference["head_gradients"] = torch.autograd.grad(
            losses, head.weight, grad_outputs=one_loss_each, retain_graph=True, is_grads_batched=True
        )[0].flatten(1)
    return reference


# -- a and e against autograd ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "arch,tied",
    [(arch, tied) for arch in ARCHITECTURES for tied in (False, True)]
    + [(arch, True) for arch in (*SOFTCAPPED_ARCHITECTURES, *SCALED_ARCHITECTURES)],
)
def test_captured_e_is_the_logit_gradient_and_a_the_head_input(arch, tied):
    model = tiny_causal_lm(arch, tie_word_embeddings=tied, vocab_size=VOCAB_SIZE)
    batch = encode(["the old bridge.", "x1 = 2 * y;", "rain"], first_document=5)
    batch["labels"] = batch["input_ids"].clone()
    batch["labels"][1, :4] = -100  # a prompt whose next tokens are not scored
    reference = autograd_reference(model, batch)
    capture = captured(model, batch, token_chunk_size=7)
    expected_tokens = int(batch["attention_mask"].sum()) - 3 - 3  # one per document, and the masked prompt
    assert len(reference["targets"]) == len(capture["targets"]) == expected_tokens
    torch.testing.assert_close(capture["errors"], reference["e"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(capture["activations"], reference["a"], rtol=1e-5, atol=1e-6)
    assert torch.equal(capture["targets"], reference["targets"])
    assert torch.equal(capture["doc_index"], reference["doc_index"])
    if not tied:  # the whole head gradient is then Σ_t e_t a_tᵀ
        torch.testing.assert_close(
            capture["errors"].T @ capture["activations"], reference["head_weight_gradient"], rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("arch,scale", [("cohere", 0.5), ("granite", 1 / 4.0)])
def test_a_logit_scale_is_chained_into_e(arch, scale):
    model = tiny_causal_lm(arch, tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    assert LogitTransform.of(model) == LogitTransform(scale=scale)
    batch = encode(["the old bridge.", "x1 = 2 * y;"])
    reference = autograd_reference(model, batch)
    capture = captured(model, batch)
    p_minus_onehot = torch.softmax(reference["logits"], -1) - torch.nn.functional.one_hot(
        reference["targets"], VOCAB_SIZE
    )
    torch.testing.assert_close(capture["errors"], scale * p_minus_onehot, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        capture["errors"].T @ capture["activations"], reference["head_weight_gradient"], rtol=1e-4, atol=1e-5
    )


def test_softcapping_is_chained_into_e():
    model = tiny_causal_lm("gemma2", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    assert LogitTransform.of(model).softcap == model.config.final_logit_softcapping == 2.0
    batch = encode(["the old bridge.", "x1 = 2 * y;"])
    reference = autograd_reference(model, batch)
    capture = captured(model, batch)
    p_minus_onehot = torch.softmax(reference["logits"], -1) - torch.nn.functional.one_hot(
        reference["targets"], VOCAB_SIZE
    )
    assert (capture["errors"] - p_minus_onehot).abs().max() > 1e-2  # the cap changes e visibly ...
    torch.testing.assert_close(
        capture["errors"].T @ capture["activations"], reference["head_weight_gradient"], rtol=1e-4, atol=1e-5
    )  # ... and keeps Σ e aᵀ the head gradient


def test_documents_longer_than_the_models_positions_are_truncated_to_them():
    """GPT-2's learned position embeddings have n_positions rows: a longer document would index past them."""
    from fisherhub.pipeline.loop import sketch_texts

    config = transformers.GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_embd=32,
        n_layer=1,
        n_head=4,
        n_positions=16,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
    )
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    texts = ["the quick brown fox jumps over the lazy dog " * 2, "short one", "rain falls on the old bridge again"]
    with pytest.warns(UserWarning, match="max_length 512 exceeds the model's 16 positions"):
        signature = sketch_texts(texts, model, TOKENIZER, m=64)
    lengths = [min(16, len(TOKENIZER(text)["input_ids"])) for text in texts]
    assert signature.num_tokens == sum(length - 1 for length in lengths)
    assert signature.metadata["max_length"] == "16"
    with pytest.warns(UserWarning, match="max_length 512 exceeds the model's 16 positions"):
        network = sketch_texts(texts, model, TOKENIZER, modules="all-linear", m=64)
    assert network.num_tokens == signature.num_tokens and network.metadata["max_length"] == "16"


# -- alignments against exact forms ------------------------------------------------------------------
def split_half_cosine(x_i: torch.Tensor, halves_i: torch.Tensor, x_j: torch.Tensor, halves_j: torch.Tensor) -> float:
    """What the split-sample sketch estimates for the kernel (x·x')²: ⟨S_i, S_j⟩ / √(⟨S_i^A, S_i^B⟩ ⟨S_j^A, S_j^B⟩)
    with S = mean x xᵀ materialized (x a flattened head gradient g_t, a document's G, a_t or e_t)."""

    def second_moment(x: torch.Tensor) -> torch.Tensor:
        return x.double().T @ x.double() / len(x)

    def split_norm(x: torch.Tensor, halves: torch.Tensor) -> torch.Tensor:
        return (second_moment(x[halves == 0]) * second_moment(x[halves == 1])).sum()

    cross = (second_moment(x_i) * second_moment(x_j)).sum()
    return float(cross / torch.sqrt(split_norm(x_i, halves_i) * split_norm(x_j, halves_j)))


def tiny_exact_tasks(count: int, seed: int = 0) -> dict[str, list[str]]:
    """Two partly aligned tasks of ``count`` documents: prose, and half prose half code (A ≈ 0.5)."""
    half = count // 2
    return {
        "prose": prose_documents(count, seed),
        "mixed": prose_documents(half, seed + 1) + code_documents(half, seed + 1),
    }


def test_token_alignment_matches_materialized_fisher_from_autograd():
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE, hidden_size=16, num_layers=1)
    spec = spec_for_model(model, TOKENIZER, m=4096)
    tasks = tiny_exact_tasks(24)
    signatures, exact = {}, {}
    for name, texts in tasks.items():
        signatures[name] = sketch_documents(model, spec, texts).finalize({"dataset": name})
        reference = autograd_reference(model, encode(texts), per_token_head_gradients=True)
        materialized = (
            reference["head_gradients"].double().T @ reference["head_gradients"].double() / len(reference["a"])
        )
        torch.testing.assert_close(
            materialized, materialized_fisher(reference["a"], reference["e"]), rtol=1e-4, atol=1e-9
        )
        assert signatures[name].num_tokens == len(reference["a"])
        exact[name] = reference
    result = alignment(signatures["prose"], signatures["mixed"])
    prose, mixed = exact["prose"], exact["mixed"]
    halves = prose["doc_index"] % 2, mixed["doc_index"] % 2
    for sketched, stderr, key in (
        (result.fisher, result.stderr, "head_gradients"),
        (result.activation, result.activation_stderr, "a"),
        (result.error, result.error_stderr, "e"),
    ):
        target = split_half_cosine(prose[key], halves[0], mixed[key], halves[1])
        assert abs(sketched - target) < 4 * stderr + 1e-3, (key, sketched, target, stderr)
    assert result.stderr < 0.05


def test_sequence_granularity_matches_exact_document_gradients():
    model = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=VOCAB_SIZE, hidden_size=16, num_layers=1)
    spec = spec_for_model(model, TOKENIZER, m=4096, granularity="sequence")
    gradients, signatures = {}, {}
    for name, texts in tiny_exact_tasks(40, seed=1).items():
        signatures[name] = sketch_documents(model, spec, texts, batch_size=16).finalize({"dataset": name})
        reference = autograd_reference(model, encode(texts))
        gradients[name] = sequence_gradients(reference["a"], reference["e"], reference["doc_index"]).flatten(1)
        assert signatures[name].num_documents == len(texts)
    documents = torch.arange(40) % 2
    target = split_half_cosine(gradients["prose"], documents, gradients["mixed"], documents)
    result = alignment(signatures["prose"], signatures["mixed"])
    assert abs(result.fisher - target) < 4 * result.stderr + 1e-3, (result.fisher, target, result.stderr)


# -- true Fisher ------------------------------------------------------------------------------------
def test_true_fisher_samples_labels_from_p_with_the_counter_based_uniforms():
    model = tiny_causal_lm("gpt2", tie_word_embeddings=True, vocab_size=VOCAB_SIZE)
    texts = prose_documents(12, seed=3) + code_documents(12, seed=3)
    batch = encode(texts, first_document=1000)
    reference = autograd_reference(model, batch)
    capture = captured(model, batch, fisher="true", seed=11, token_chunk_size=50)
    probabilities = torch.softmax(reference["logits"].double(), -1).numpy()
    mask = batch["attention_mask"]
    _, positions = (mask[:, :-1] & mask[:, 1:]).bool().nonzero(as_tuple=True)
    index = reference["doc_index"].numpy().astype(np.uint64) * np.uint64(2**32) + positions.numpy().astype(np.uint64)
    u = uniforms(11, Stream.TRUE_FISHER_LABELS, index).numpy()
    cumulative = probabilities.cumsum(axis=1)
    labels = np.array([np.searchsorted(c, ui * c[-1], side="right") for c, ui in zip(cumulative, u)])
    assert np.array_equal(capture["targets"].numpy(), labels)
    expected_errors = probabilities - np.eye(VOCAB_SIZE)[labels]
    np.testing.assert_allclose(capture["errors"].numpy(), expected_errors, atol=1e-6)
    # y ~ p: E[e] = 0, with E‖mean e‖² = Σ_t (1 − ‖p_t‖²) / N²
    mean_error = capture["errors"].double().mean(0)
    expected_square = (1 - (probabilities**2).sum(1)).sum() / len(labels) ** 2
    assert float(mean_error @ mean_error) < 3 * expected_square
    spec = spec_for_model(model, TOKENIZER, m=512, fisher="true", seed=11)
    state, direct = SketchState(spec), SketchState(spec)
    sketch_batch(state, model, batch)
    direct.update(
        HeadBatch(
            activations=reference["a"],
            doc_index=reference["doc_index"],
            errors=torch.from_numpy(expected_errors).float(),
        )
    ).flush()
    assert_same_sums(state, direct)


# -- masks, padding, batching, dtypes -------------------------------------------------------------------
@pytest.mark.parametrize("fisher", ["empirical", "true"])
def test_padding_side_batching_and_chunking_do_not_change_the_signature(fisher):
    model = tiny_causal_lm("gpt2", tie_word_embeddings=True, vocab_size=VOCAB_SIZE)  # left padding shifts its positions
    spec = spec_for_model(model, TOKENIZER, m=512, fisher=fisher)
    texts = prose_documents(10, seed=4) + code_documents(10, seed=4)
    right = sketch_documents(model, spec, texts, batch_size=7)
    left = sketch_documents(model, spec, texts, batch_size=20, padding_side="left")
    lengths = [len(TOKENIZER(text)["input_ids"]) for text in texts]
    assert right.num_tokens == left.num_tokens == sum(lengths) - len(texts)
    assert right.num_documents == left.num_documents == len(texts)
    assert_same_sums(left, right)
    chunked = SketchState(spec)
    batch = encode(texts, padding_side="left")
    batch["input_ids"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, 17)  # padding ids are never read
    assert sketch_batch(chunked, model, batch, token_chunk_size=9) == right.num_tokens
    assert_same_sums(chunked, right)
    signatures = right.finalize(), left.finalize()
    for name in ("joint", "activation", "error"):
        ours, theirs = getattr(signatures[1], name), getattr(signatures[0], name)
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5 * float(theirs.abs().max()))


def test_label_masks_are_respected_and_unscored_batches_skipped():
    model = tiny_causal_lm("gemma", tie_word_embeddings=True, vocab_size=VOCAB_SIZE)
    spec = spec_for_model(model, TOKENIZER, m=256, reflection=False)
    batch = encode(["the old bridge.", "x1 = 2 * y;"])
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    batch["labels"][0, :6] = -100
    scored = scored_positions(batch)
    assert len(scored) == int(batch["attention_mask"].sum()) - 2 - 5
    assert scored.positions[scored.rows == 0].min() == 5  # label at t+1 = 6 is the first one kept
    state = SketchState(spec)
    assert sketch_batch(state, model, batch) == len(scored) == state.num_tokens
    batch["labels"][:] = -100
    empty = SketchState(spec)
    assert sketch_batch(empty, model, batch) == 0
    assert empty.num_tokens == empty.num_documents == 0 and not empty.sums.any()


def test_bfloat16_model_gives_the_float32_signature():
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    model.to(torch.bfloat16).to(torch.float32)  # weights exactly representable in both: the same head checksum
    texts = prose_documents(16, seed=5) + code_documents(16, seed=5)
    spec = spec_for_model(model, TOKENIZER, m=1024)
    reference = sketch_documents(model, spec, texts).finalize()
    half_model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    half_model.load_state_dict(model.state_dict())
    half_model.to(torch.bfloat16)
    assert spec_for_model(half_model, TOKENIZER, like=reference) == spec
    half = sketch_documents(half_model, spec, texts).finalize()
    assert half.num_tokens == reference.num_tokens
    for name in ("joint", "activation", "error"):
        ours, theirs = getattr(half, name), getattr(reference, name)
        assert float((ours - theirs).norm() / theirs.norm()) < 0.05, name
    assert alignment(half, reference).fisher > 0.98


# -- specs, fingerprints, PEFT ---------------------------------------------------------------------
def test_spec_for_model_sets_dimensions_fingerprint_and_pilot_mean():
    model = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    assert spec_for_model(model, m=128).reflection is None  # no tokenizer, no probe text: no reflection
    assert spec_for_model(model, TOKENIZER, m=128, reflection=False).reflection is None
    spec = spec_for_model(model, TOKENIZER, m=128, seed=3)  # the reflection is on by default
    assert (spec.d, spec.vocab_size, spec.m, spec.seed) == (32, VOCAB_SIZE, 128, 3)
    assert spec.model_fingerprint == HeadModel.of(model).fingerprint(TOKENIZER)
    probe = [autograd_reference(model, encode([text]))["a"] for text in PROBE_DOCUMENTS]
    torch.testing.assert_close(torch.tensor(spec.reflection), torch.cat(probe).mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(pilot_mean(model, TOKENIZER), torch.cat(probe).mean(0), rtol=1e-5, atol=1e-6)
    assert spec_for_model(model, m=128, reflection=False).model_fingerprint.tokenizer_checksum is None
    with torch.no_grad():
        model.get_output_embeddings().weight[3, 0] += 1e-3
    assert HeadModel.of(model).head_checksum != spec.model_fingerprint.head_checksum
    padded_tokenizer = tiny_tokenizer(VOCAB_SIZE)
    padded_tokenizer.pad_token = padded_tokenizer.eos_token  # padding never matters
    assert (
        HeadModel.of(model).fingerprint(padded_tokenizer).tokenizer_checksum
        == spec.model_fingerprint.tokenizer_checksum
    )


def test_peft_wrapped_models_sketch_through_the_base_head():
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    fingerprint = HeadModel.of(model).fingerprint(TOKENIZER)
    head = model.get_output_embeddings()
    batch = encode(prose_documents(4, seed=6))
    spec = spec_for_model(model, TOKENIZER, m=256)
    plain = SketchState(spec)
    sketch_batch(plain, model, batch)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    assert output_head(wrapped).base_layer is head
    assert HeadModel.of(wrapped).fingerprint(TOKENIZER) == fingerprint
    lora = SketchState(spec)
    sketch_batch(lora, wrapped, batch)  # LoRA B starts at 0: the same function
    assert_same_sums(lora, plain)


# -- bad input --------------------------------------------------------------------------------------
def test_model_without_output_embeddings_is_refused():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        eos_token_id=1,
    )
    model = transformers.AutoModel.from_config(config)
    with pytest.raises(InputError, match="no output embeddings.*AutoModelForCausalLM"):
        output_head(model)
    with pytest.raises(InputError, match="no output embeddings"):
        spec_for_model(model, TOKENIZER)


def test_tokenizer_that_does_not_match_the_head_is_refused():
    model = tiny_causal_lm("gpt2", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    HeadModel.of(model, tiny_tokenizer(40))  # fewer ids than head rows is fine
    with pytest.raises(InputError, match="ids up to 99 but the model's head has only K=64 rows"):
        HeadModel.of(model, tiny_tokenizer(100))
    with pytest.raises(InputError, match="K=64 rows"):
        spec_for_model(model, tiny_tokenizer(100))
    batch = dict(tiny_tokenizer(100)(["XYZ! QQ"], return_tensors="pt"))  # ids ≥ 64
    batch["doc_index"] = torch.tensor([0])
    for fisher in ("empirical", "true"):  # labels, or (true Fisher) input ids out of range
        with pytest.raises(InputError, match="does not belong to this model"):
            sketch_batch(SketchState(spec_for_model(model, reflection=False, m=64, fisher=fisher)), model, batch)


def test_like_a_signature_of_another_base_model_is_refused():
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    texts = prose_documents(8, seed=7)
    signature = sketch_documents(model, spec_for_model(model, TOKENIZER, m=256), texts).finalize(
        {"base_model": "tiny-a"}
    )
    assert spec_for_model(model, TOKENIZER, m=8, like=signature) == signature.spec
    assert spec_for_model(model, like=signature) == signature.spec  # tokenizer unknown: head checksum only
    other = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE, seed=1)
    with pytest.raises(
        FisherHubError, match=r"another base model \(head checksum [0-9a-f]{16} vs [0-9a-f]{16}.*tiny-a"
    ):
        spec_for_model(other, TOKENIZER, like=signature)
    with pytest.raises(FisherHubError, match="another tokenizer"):
        spec_for_model(model, tiny_tokenizer(60), like=signature)
    with pytest.raises(InputError, match="Signature.load"):
        spec_for_model(model, like="signature.safetensors")


def test_bad_batches_and_unknown_logit_transforms_are_refused():
    model = tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=VOCAB_SIZE)
    spec = spec_for_model(model, m=64, reflection=False)
    batch = encode(["the old bridge."])
    with pytest.raises(InputError, match="doc_index"):
        sketch_batch(SketchState(spec), model, {k: v for k, v in batch.items() if k != "doc_index"})
    with pytest.raises(InputError, match="head of K=64, d=16"):
        sketch_batch(
            SketchState(spec_for_model(tiny_causal_lm("llama", True, hidden_size=16), m=64, reflection=False)),
            model,
            batch,
        )
    config = transformers.CohereConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        logit_scale=0.5,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
    )
    scaled = transformers.AutoModelForCausalLM.from_config(config)
    scaled.logit_scale = 0.7  # the forward scales by 0.7, its config says 0.5: a transform fisherhub does not know
    with pytest.raises(InputError, match="changes its logits after the output head"):
        sketch_batch(SketchState(spec_for_model(scaled, m=64, reflection=False)), scaled, batch)
