"""Network-level signatures (SPEC §2b) and head-input signatures against autograd on tiny random models.

The reference runs every document alone through a copy of the model whose sketched modules have their own
weight tensors (so a tied head's gradient is the head's alone) and reads the parameter gradients of the
summed token loss; x and δ come from hooks with ``retain_grad``. Exact cosines use the split-half form the
sketch estimates (SPEC §2: half = document index mod 2).
"""

from __future__ import annotations

import copy
import dataclasses

import peft
import pytest
import torch
from fisherhub.testing.tiny_models import code_documents, prose_documents, tiny_causal_lm, tiny_tokenizer

from fisherhub import IncompatibleSignaturesError, InputError, Signature, SketchSpec, SketchState, alignment
from fisherhub.lm import head_batches, sketch_batch, spec_for_model
from fisherhub.core.batch import HeadBatch
from fisherhub.core.exact import gram_inner_products
from fisherhub.core.features import feature_map
from fisherhub.core.network import NetworkBatch, NetworkFeatureMap, _network_feature_map
from fisherhub.core.state import NetworkSketchState
from fisherhub.lm.modules import linear_modules
from fisherhub.lm.network import sketch_network_batch
from fisherhub.lm.specs import network_spec_for_model
from fisherhub.pipeline import sketch_network_kernels, sketch_texts

VOCAB_SIZE = 64
TOKENIZER = tiny_tokenizer(VOCAB_SIZE)
LLAMA_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]


def tasks(count: int, seed: int = 0) -> dict[str, list[str]]:
    """prose, and half prose half code (partly aligned)."""
    half = count // 2
    return {
        "prose": prose_documents(count, seed),
        "mixed": prose_documents(half, seed + 1) + code_documents(half, seed + 1),
    }


def encode(texts: list[str], first_document: int = 0, padding_side: str = "right") -> dict[str, torch.Tensor]:
    batch = dict(TOKENIZER(texts, padding=True, padding_side=padding_side, return_tensors="pt"))
    batch["doc_index"] = torch.arange(first_document, first_document + len(texts))
    return batch


def sketch_states(model, specs, texts, *, batch_size=8, first_document=0, **encode_options) -> list[NetworkSketchState]:
    states = [NetworkSketchState(spec) for spec in specs]
    for start in range(0, len(texts), batch_size):
        batch = encode(texts[start : start + batch_size], first_document + start, **encode_options)
        sketch_network_batch(states, model, batch)
    return states


# -- the reference: autograd, one document at a time ------------------------------------------------------
@dataclasses.dataclass
class Reference:
    """Per task: each module's inputs X_l and output gradients D_l at every position (P, ·), which positions
    are scored, each position's document, and every document's parameter gradient per module."""

    inputs: list[torch.Tensor]
    gradients: list[torch.Tensor]
    scored: torch.Tensor
    documents: torch.Tensor
    parameter_gradients: list[torch.Tensor]  # per module (num_docs, in·out)


def reference(model, names: list[str], texts: list[str]) -> Reference:
    untied = copy.deepcopy(model)
    modules = dict(untied.named_modules())
    for name in names:  # own weights: the gradient of the linear use alone (a tied head's embedding use excluded)
        modules[name].weight = torch.nn.Parameter(modules[name].weight.detach().clone())
    saved: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook_for(name):
        def hook(module, args, output):
            output.retain_grad()
            saved[name] = (args[0], output)

        return hook

    handles = [modules[name].register_forward_hook(hook_for(name)) for name in names]
    inputs, gradients, scored, documents = [[] for _ in names], [[] for _ in names], [], []
    parameter_gradients = [[] for _ in names]
    try:
        for index, text in enumerate(texts):
            ids = TOKENIZER(text, return_tensors="pt")["input_ids"]
            untied.zero_grad()
            logits = untied(input_ids=ids).logits[0]
            torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:], reduction="sum").backward()
            for k, name in enumerate(names):
                x, output = saved[name]
                inputs[k].append(x[0].detach().double())
                gradients[k].append(output.grad[0].double())
                parameter_gradients[k].append(modules[name].weight.grad.flatten().double().clone())
            positions = ids.shape[1]
            scored.append(torch.arange(positions) < positions - 1)
            documents.append(torch.full((positions,), index))
    finally:
        for handle in handles:
            handle.remove()
    return Reference(
        [torch.cat(x) for x in inputs],
        [torch.cat(g) for g in gradients],
        torch.cat(scored),
        torch.cat(documents),
        [torch.stack(g) for g in parameter_gradients],
    )


def kernel_matrices(ref_i: Reference, ref_j: Reference, granularity: str, kernel: str) -> dict[str, tuple]:
    """Pairwise kernel values and each side's counting: name -> (K (rows_i, rows_j), rows' documents i, j,
    the rows counted as examples i, j) for the joint, activation and error sketches."""
    modules = range(len(ref_i.inputs))
    x = [ref_i.inputs[k] @ ref_j.inputs[k].T for k in modules]
    d = [ref_i.gradients[k] @ ref_j.gradients[k].T for k in modules]
    if granularity == "sequence":
        g = [ref_i.parameter_gradients[k] @ ref_j.parameter_gradients[k].T for k in modules]
        joint = sum(g) ** 2 if kernel == "full" else sum(gk**2 for gk in g)
        docs_i, docs_j = torch.arange(joint.shape[0]), torch.arange(joint.shape[1])
        joint_entry = (
            joint,
            docs_i,
            docs_j,
            torch.ones_like(docs_i, dtype=torch.bool),
            torch.ones_like(docs_j, dtype=torch.bool),
        )
    else:
        products = [xk * dk for xk, dk in zip(x, d)]
        joint = sum(products) ** 2 if kernel == "full" else sum(p**2 for p in products)
        joint_entry = (joint, ref_i.documents, ref_j.documents, ref_i.scored, ref_j.scored)
    square = (lambda ms: sum(ms) ** 2) if kernel == "full" else (lambda ms: sum(mk**2 for mk in ms))
    scored_i, scored_j = ref_i.scored, ref_j.scored
    activation = square(x)[scored_i][:, scored_j]
    return {
        "joint": joint_entry,
        "activation": (
            activation,
            ref_i.documents[scored_i],
            ref_j.documents[scored_j],
            scored_i[scored_i],
            scored_j[scored_j],
        ),
        "error": (square(d), ref_i.documents, ref_j.documents, scored_i, scored_j),
    }


def split_half_cosine(ref_i: Reference, ref_j: Reference, granularity: str, kernel: str) -> dict[str, float]:
    """⟨S_i, S_j⟩ / √(⟨S_i^A, S_i^B⟩ ⟨S_j^A, S_j^B⟩) per sketch, with S = (Σ over rows of the feature) /
    (counted rows), halves by document mod 2: what the split-sample sketch estimates."""
    cross = kernel_matrices(ref_i, ref_j, granularity, kernel)
    self_i = kernel_matrices(ref_i, ref_i, granularity, kernel)
    self_j = kernel_matrices(ref_j, ref_j, granularity, kernel)

    def split_norm(entry):
        values, docs, _, counted, _ = entry
        half = docs % 2
        a, b = half == 0, half == 1
        return values[a][:, b].sum() / (counted[a].sum() * counted[b].sum())

    cosines = {}
    for name, (values, _, _, counted_i, counted_j) in cross.items():
        inner = values.sum() / (counted_i.sum() * counted_j.sum())
        cosines[name] = float(inner / torch.sqrt(split_norm(self_i[name]) * split_norm(self_j[name])))
    return cosines


# -- against autograd ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arch,tied,suffixes",
    [
        ("llama", True, LLAMA_LINEAR),
        ("llama", False, LLAMA_LINEAR),
        ("gpt2", True, ["c_attn", "c_proj", "c_fc", "lm_head"]),
    ],
)
def test_per_document_sums_of_captured_gradients_are_the_parameter_gradients(arch, tied, suffixes):
    model = tiny_causal_lm(arch, tie_word_embeddings=tied, vocab_size=VOCAB_SIZE, hidden_size=16, num_layers=1)
    selected = linear_modules(model, suffixes)
    ref = reference(model, [name for name, _ in selected], prose_documents(6, seed=7))
    for k, (_name, module) in enumerate(selected):
        for doc in range(6):
            rows = ref.documents == doc
            summed = ref.gradients[k][rows].T @ ref.inputs[k][rows]  # Σ_t δ_t x_tᵀ (out, in)
            weight_shaped = summed if isinstance(module, torch.nn.Linear) else summed.T  # Conv1D stores W as (in, out)
            expected = ref.parameter_gradients[k][doc]
            torch.testing.assert_close(
                weight_shaped.flatten(), expected, rtol=1e-4, atol=1e-6 * float(expected.abs().max())
            )


@pytest.mark.parametrize(
    "arch,tied,granularity",
    [
        ("llama", True, "sequence"),
        ("llama", False, "sequence"),
        ("llama", True, "token"),
        ("gpt2", False, "token"),
    ],
)
def test_sketched_cosines_match_exact_cosines_from_autograd(arch, tied, granularity):
    model = tiny_causal_lm(arch, tie_word_embeddings=tied, vocab_size=VOCAB_SIZE, hidden_size=16, num_layers=1)
    suffixes = LLAMA_LINEAR if arch == "llama" else ["c_attn", "c_proj", "c_fc", "lm_head"]
    spec = network_spec_for_model(model, TOKENIZER, modules=suffixes, m=4096, granularity=granularity)
    names = [name for name, _, _ in spec.modules]
    specs = [spec, dataclasses.replace(spec, kernel="block")]
    signatures, references = {}, {}
    for task, texts in tasks(40, seed=2).items():
        states = sketch_states(model, specs, texts)
        signatures[task] = [state.finalize({"dataset": task}) for state in states]
        references[task] = reference(model, names, texts)
        lengths = [len(TOKENIZER(t)["input_ids"]) for t in texts]
        assert signatures[task][0].num_tokens == sum(lengths) - len(texts)
        assert signatures[task][0].num_documents == len(texts)
    for index, kernel in enumerate(("full", "block")):
        exact = split_half_cosine(references["prose"], references["mixed"], granularity, kernel)
        result = alignment(signatures["prose"][index], signatures["mixed"][index])
        for name, sketched, stderr in (
            ("joint", result.fisher, result.stderr),
            ("activation", result.activation, result.activation_stderr),
            ("error", result.error, result.error_stderr),
        ):
            assert abs(sketched - exact[name]) < 4 * stderr + 1e-3, (kernel, name, sketched, exact[name], stderr)
        assert result.stderr < 0.1
    assert 0.1 < exact["joint"] < 0.95  # the two tasks are neither aligned nor orthogonal: the test can fail


def test_features_are_unbiased_for_the_kernel_of_the_concatenated_gradient():
    """E[φ(G)·φ(G')] = (G·G')² (full) and Σ_l (G_l·G'_l)² (block), over independent seeds."""
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE, hidden_size=16, num_layers=1)
    texts = ["the old river stone.", "the old city light."]
    base = network_spec_for_model(model, TOKENIZER, modules=LLAMA_LINEAR, m=1024, granularity="sequence")
    ref = reference(model, [name for name, _, _ in base.modules], texts)
    per_module = [g[0] @ g[1] for g in ref.parameter_gradients]
    exact = {"full": float(sum(per_module) ** 2), "block": float(sum(p**2 for p in per_module))}
    estimates = {"full": [], "block": []}
    for seed in range(24):
        spec = dataclasses.replace(base, seed=seed)
        states = sketch_states(model, [spec, dataclasses.replace(spec, kernel="block")], texts)
        for state in states:
            estimates[state.spec.kernel].append(
                float(state.sums[0, 0] @ state.sums[0, 1])
            )  # docs 0 and 1: one per half
    for kernel, values in estimates.items():
        values = torch.tensor(values, dtype=torch.float64)
        mean, se = float(values.mean()), float(values.std() / len(values) ** 0.5)
        assert abs(mean - exact[kernel]) < 4 * se, (kernel, mean, exact[kernel], se)
        assert se < 0.1 * exact[kernel]
    assert exact["full"] > 1.5 * exact["block"]  # the cross-module terms matter for these two documents


# -- the head-only case ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("granularity", ["token", "sequence"])
@pytest.mark.parametrize("tied", [True, False])
def test_head_only_network_sketch_with_the_head_projectors_is_the_head_sketch(granularity, tied):
    model = tiny_causal_lm("qwen2", tie_word_embeddings=tied, vocab_size=VOCAB_SIZE)
    head_spec = spec_for_model(model, TOKENIZER, m=512, granularity=granularity)
    network_spec = network_spec_for_model(model, TOKENIZER, modules=["lm_head"], m=512, granularity=granularity)
    head_map = feature_map(head_spec)
    projectors = NetworkFeatureMap(
        network_spec.modules, 512, [(head_map.activation_projector, head_map.error_projector)]
    )
    texts = prose_documents(10, seed=5) + code_documents(10, seed=5)
    head_state, network_state = SketchState(head_spec), NetworkSketchState(network_spec)
    for start in range(0, 20, 7):
        batch = encode(texts[start : start + 7], start)
        sketch_batch(head_state, model, batch)
        sketch_network_batch([network_state], model, batch, feature_map=projectors)
    scale = float(head_state.sums.abs().max())
    torch.testing.assert_close(network_state.sums, head_state.sums, rtol=1e-4, atol=1e-5 * scale)
    assert torch.equal(network_state.token_counts, head_state.token_counts)
    assert torch.equal(network_state.document_counts, head_state.document_counts)


# -- padding, processes, determinism -------------------------------------------------------------------------------
def test_padding_contributes_nothing():
    model = tiny_causal_lm("gpt2", tie_word_embeddings=True, vocab_size=VOCAB_SIZE)  # left padding shifts its positions
    spec = network_spec_for_model(model, TOKENIZER, modules="all-linear", m=256, granularity="token")
    specs = [spec, dataclasses.replace(spec, granularity="sequence")]
    texts = prose_documents(8, seed=6) + code_documents(8, seed=6)
    alone = [NetworkSketchState(s) for s in specs]
    for index, text in enumerate(texts):  # one document per batch: no padding at all
        sketch_network_batch(alone[:1], model, encode([text], index))
        sketch_network_batch(alone[1:], model, encode([text], index))
    for side in ("right", "left"):
        batch = encode(texts, padding_side=side)
        batch["input_ids"] = batch["input_ids"].masked_fill(
            batch["attention_mask"] == 0, 17
        )  # padding ids are never read
        padded = [NetworkSketchState(s) for s in specs]
        sketch_network_batch(padded[:1], model, batch)
        sketch_network_batch(padded[1:], model, batch)
        for ours, expected in zip(padded, alone):
            scale = float(expected.sums.abs().max())
            torch.testing.assert_close(ours.sums, expected.sums, rtol=1e-4, atol=1e-5 * scale)
            assert torch.equal(ours.token_counts, expected.token_counts)
            assert torch.equal(ours.document_counts, expected.document_counts)


def test_two_processes_merged_equal_one_process_and_the_signature_round_trips(tmp_path):
    model = tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=VOCAB_SIZE)
    texts = prose_documents(16, seed=8) + code_documents(16, seed=8)
    for granularity in ("token", "sequence"):
        spec = network_spec_for_model(model, TOKENIZER, modules=["q_proj", "v_proj"], m=256, granularity=granularity)
        specs = [spec, dataclasses.replace(spec, kernel="block")]
        one = sketch_states(model, specs, texts)
        first = sketch_states(model, specs, texts[:16])
        second = sketch_states(model, specs, texts[16:], first_document=16)
        for whole, a, b in zip(one, first, second):
            merged = a.merge(b)
            torch.testing.assert_close(merged.sums, whole.sums, rtol=1e-12, atol=1e-15 * float(whole.sums.abs().max()))
            assert torch.equal(merged.token_counts, whole.token_counts)
            assert torch.equal(merged.document_counts, whole.document_counts)
            signature = whole.finalize({"dataset": "mixed"})
            signature.save(tmp_path / "network.safetensors")
            loaded = Signature.load(tmp_path / "network.safetensors")
            assert loaded.spec == signature.spec and loaded.sketch_id == signature.sketch_id
            assert torch.equal(loaded.joint, signature.joint)
            whole.save(tmp_path / "state.safetensors")
            assert torch.equal(NetworkSketchState.load(tmp_path / "state.safetensors").sums, whole.sums)


def test_projections_are_deterministic_and_the_sketch_id_names_the_modules():
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    spec = network_spec_for_model(model, TOKENIZER, modules="all-linear", m=128)
    built = NetworkFeatureMap.for_spec(spec)
    _network_feature_map.cache_clear()
    rebuilt = NetworkFeatureMap.for_spec(spec)
    assert built is not rebuilt
    rows = [[torch.cat(p.dense_rows()) for p in pair] for pair in built.projectors]
    for first, again in zip(rows, ([torch.cat(p.dense_rows()) for p in pair] for pair in rebuilt.projectors)):
        assert all(torch.equal(a, b) for a, b in zip(first, again))
    q0, q1 = rows[0][0], rows[7][0]  # layer 0 and layer 1 q_proj inputs: same shape, independent signs
    assert q0.shape == q1.shape and float((q0 * q1).mean().abs()) < 0.1
    texts = prose_documents(12, seed=9)
    signatures = [sketch_texts(texts, model, TOKENIZER, spec, batch_size=5) for _ in range(2)]
    for name in ("joint", "activation", "error", "split_norms"):
        assert torch.equal(getattr(signatures[0], name), getattr(signatures[1], name))
    ids = {
        spec.sketch_id,
        network_spec_for_model(model, TOKENIZER, modules=["q_proj"], m=128).sketch_id,
        network_spec_for_model(model, TOKENIZER, modules="all-linear", m=128, kernel="block").sketch_id,
        spec_for_model(model, TOKENIZER, m=128).sketch_id,
    }
    assert len(ids) == 4
    other = sketch_texts(texts, model, TOKENIZER, modules=["q_proj"], m=128)
    with pytest.raises(IncompatibleSignaturesError, match="modules"):
        alignment(signatures[0], other)


# -- module sets -------------------------------------------------------------------------------------------------
def test_module_sets_from_names_all_linear_and_adapter_configs(tmp_path):
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    everything = [name for name, _ in linear_modules(model, "all-linear")]
    assert len(everything) == 2 * 7 and "lm_head" not in everything
    assert [n for n, _ in linear_modules(model, ["q_proj", "lm_head"])] == [
        "model.layers.0.self_attn.q_proj",
        "model.layers.1.self_attn.q_proj",
        "lm_head",
    ]
    peft.LoraConfig(target_modules=["q_proj", "v_proj"], layers_to_transform=[1]).save_pretrained(tmp_path / "a")
    peft.LoraConfig(target_modules=["down_proj"]).save_pretrained(tmp_path / "b")
    from_adapters = [n for n, _ in linear_modules(model, adapters=[tmp_path / "a", tmp_path / "b"])]
    assert from_adapters == [
        "model.layers.0.mlp.down_proj",
        "model.layers.1.self_attn.q_proj",
        "model.layers.1.self_attn.v_proj",
        "model.layers.1.mlp.down_proj",
    ]
    peft.LoraConfig(target_modules="all-linear").save_pretrained(tmp_path / "c")
    assert [n for n, _ in linear_modules(model, adapters=tmp_path / "c")] == everything
    with pytest.raises(InputError, match="no linear module matches"):
        linear_modules(model, ["q_prj"])
    with pytest.raises(InputError, match="one of the two"):
        linear_modules(model)
    with pytest.raises(InputError, match="adapter config"):
        linear_modules(model, adapters=tmp_path / "missing")
    with pytest.raises(InputError, match="base model"):
        linear_modules(
            peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(target_modules=["q_proj"])), "all-linear"
        )
    other = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE, hidden_size=16)
    with pytest.raises(InputError):
        sketch_texts(prose_documents(4, 0), other, TOKENIZER, network_spec_for_model(model, modules=["q_proj"]))


def test_kernels_from_one_pass_equal_separate_passes():
    model = tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=VOCAB_SIZE)
    import datasets

    texts = prose_documents(10, seed=10) + code_documents(10, seed=10)
    both = sketch_network_kernels(
        datasets.Dataset.from_dict({"text": texts}), model, TOKENIZER, modules=["o_proj"], m=128
    )
    block = sketch_texts(texts, model, TOKENIZER, modules=["o_proj"], m=128, kernel="block")
    assert both["block"].sketch_id == block.sketch_id != both["full"].sketch_id
    assert torch.equal(both["block"].joint, block.joint)


# -- head-input signatures ------------------------------------------------------------------------------------------
def test_head_input_sketch_uses_delta_w_transpose_e_and_matches_the_exact_alignment():
    model = tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=VOCAB_SIZE, hidden_size=16, num_layers=1)
    spec = spec_for_model(model, TOKENIZER, m=4096, error_space="head-input")
    assert spec.sketch_id != spec_for_model(model, TOKENIZER, m=4096).sketch_id
    assert (
        dataclasses.replace(spec, error_space="logits").sketch_id == spec_for_model(model, TOKENIZER, m=4096).sketch_id
    )
    head = model.get_output_embeddings()
    pairs, signatures = {}, {}
    for task, texts in tasks(30, seed=3).items():
        batch = encode(texts)
        state = SketchState(spec)
        sketch_batch(state, model, batch, token_chunk_size=37)
        signatures[task] = state.finalize({"dataset": task})
        saved = {}
        handle = head.register_forward_hook(lambda module, args, output: saved.update(a=args[0]))
        try:
            with torch.enable_grad():
                embeddings = model.get_input_embeddings()(batch["input_ids"]).detach().requires_grad_(True)
                logits = model(inputs_embeds=embeddings, attention_mask=batch["attention_mask"]).logits
                saved["a"].retain_grad()
                mask = batch["attention_mask"].bool()
                rows, positions = (mask[:, :-1] & mask[:, 1:]).nonzero(as_tuple=True)
                targets = batch["input_ids"][:, 1:][rows, positions]
                torch.nn.functional.cross_entropy(logits[rows, positions], targets, reduction="sum").backward()
        finally:
            handle.remove()
        a, delta = saved["a"][rows, positions].detach(), saved["a"].grad[rows, positions]
        chunks = list(head_batches(model, batch, materialize_errors=True))
        torch.testing.assert_close(
            torch.cat([c.errors for c in chunks]) @ head.weight.detach(), delta, rtol=1e-4, atol=1e-6
        )
        direct = (
            SketchState(spec).update(HeadBatch(activations=a, doc_index=batch["doc_index"][rows], errors=delta)).flush()
        )
        torch.testing.assert_close(state.sums, direct.sums, rtol=1e-4, atol=1e-5 * float(direct.sums.abs().max()))
        pairs[task] = (a, delta, batch["doc_index"][rows] % 2)
    (a_i, d_i, h_i), (a_j, d_j, h_j) = pairs["prose"], pairs["mixed"]

    def split(a, d, h):
        return gram_inner_products(a[h == 0], d[h == 0], a[h == 1], d[h == 1])

    exact = gram_inner_products(a_i, d_i, a_j, d_j) / torch.sqrt(split(a_i, d_i, h_i) * split(a_j, d_j, h_j))
    result = alignment(signatures["prose"], signatures["mixed"])
    for sketched, stderr, target in zip(
        (result.fisher, result.activation, result.error),
        (result.stderr, result.activation_stderr, result.error_stderr),
        exact.tolist(),
    ):
        assert abs(sketched - target) < 4 * stderr + 1e-3, (sketched, target, stderr)
    with pytest.raises(InputError, match="error space"):
        SketchState(spec).update(
            HeadBatch(
                activations=a_i,
                doc_index=torch.zeros(len(a_i), dtype=torch.long),
                errors=torch.zeros(len(a_i), VOCAB_SIZE),
            )
        )


def test_bad_network_inputs_are_refused():
    model = tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=VOCAB_SIZE)
    spec = network_spec_for_model(model, TOKENIZER, modules=["q_proj"], m=64)
    with pytest.raises(InputError, match="network"):
        SketchState(spec).update(
            HeadBatch(activations=torch.zeros(2, 32), doc_index=torch.arange(2), errors=torch.zeros(2, VOCAB_SIZE))
        )
    with pytest.raises(InputError, match="empirical"):
        network_spec_for_model(model, modules=["q_proj"], fisher="true")
    with pytest.raises(InputError, match="kernel"):
        SketchSpec(d=4, vocab_size=8, kernel="block")
    batch = NetworkBatch(
        NetworkFeatureMap.for_spec(spec), torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.bool)
    )
    with pytest.raises(InputError, match="no inputs"):
        batch.features("full")
    with pytest.raises(InputError, match=r"\(N, 32\)"):
        batch.add(0, torch.zeros(3, 31), torch.zeros(3, 32))
