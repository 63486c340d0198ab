"""The hand-off from a selection to PEFT, on the local Hub server with a tiny random Llama: a token reaches every
Hub call (a private adapter is ranked and loaded with it, skipped without it), adapters saved in a subfolder
of a repo, the base model read from a Hub adapter's ``adapter_config.json``, and the mixing weights with
PEFT's ``add_weighted_adapter``."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from test_selection import domain_texts
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub.core.errors import InputError
from fisherhub.hub import push_signature
from fisherhub.pipeline.loop import sketch_texts
from fisherhub.testing.hub_repos import save_random_lora
from fisherhub.selection import NoCompatibleCandidatesError, select_adapter
from fisherhub.analysis.mixing import mixing_weights

VOCAB_SIZE = 96
M = 512
BASE = "handoff/tiny-llama"
READER = "hf_private_reader_token"  # the one token that may read the private repo


def lora_folder(base, folder, seed: int, rank: int = 4, base_model: str = BASE):
    """A saved LoRA adapter with random A and B (a nonzero update, no training needed)."""
    return save_random_lora(base, folder, seed, base_model, rank)


def upload(api, repo_id: str, folder, *, path_in_repo: str | None = None, private: bool = False) -> str:
    api.create_repo(repo_id, private=private, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=folder, path_in_repo=path_in_repo)
    return repo_id


@pytest.fixture(scope="module")
def world(hub_server, tmp_path_factory):
    """Two signed adapters of BASE (domains 0 and 1), the same adapter 1 in a private repo and in a subfolder
    of a repo, one whose config names another base model; signatures sketched like= the first."""
    from huggingface_hub import HfApi

    api, folder = HfApi(), tmp_path_factory.mktemp("handoff")
    base = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=VOCAB_SIZE)
    tokenizer = tiny_tokenizer(VOCAB_SIZE)
    first = sketch_texts(
        domain_texts(0, 60, seed=1), base, tokenizer, m=M, reflection=True, metadata={"base_model": BASE}
    )
    second = sketch_texts(domain_texts(1, 60, seed=2), base, tokenizer, first, metadata={"base_model": BASE})
    adapters = []
    for domain, signature in enumerate((first, second)):
        adapter = lora_folder(base, folder / f"lora-{domain}", seed=domain)
        push_signature(signature, str(adapter))  # .fisher_signatures/ + index.json in the folder
        adapters.append(adapter)
    repos = [upload(api, f"handoff/lora-{d}", adapter) for d, adapter in enumerate(adapters)]
    private = upload(api, "handoff/private-lora", adapters[1], private=True)
    hub_server.repo(private).granted = {READER}
    upload(api, "handoff/many-adapters", adapters[1], path_in_repo="domain-1")
    other = lora_folder(base, folder / "other-base", seed=5, base_model="org/another-base")
    push_signature(second, str(other), force=True)  # a signature of another base model: only when forced
    (other / "README.md").write_text("---\nlibrary_name: peft\n---\n# a LoRA whose card names no base model\n")
    upload(api, "handoff/other-base-lora", other)
    target = sketch_texts(
        domain_texts(0, 40, seed=9) + domain_texts(1, 40, seed=10),
        base,
        tokenizer,
        first,
        metadata={"base_model": BASE},
    )
    return {"base": base, "adapters": adapters, "repos": repos, "private": private, "target": target}


def lora_state(model, adapter_name: str) -> dict[str, torch.Tensor]:
    return {
        key.replace(f".{adapter_name}.", "."): value
        for key, value in model.state_dict().items()
        if f".{adapter_name}." in key
    }


def saved_state(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def same_weights(loaded: dict[str, torch.Tensor], saved: dict[str, torch.Tensor]) -> bool:
    """Every saved LoRA tensor equals the loaded one of the same module and factor."""

    def key(name: str) -> str:
        return name.split("layers.", 1)[1].replace(".weight", "")

    by_module = {key(name): value for name, value in loaded.items()}
    return len(saved) == len(by_module) and all(torch.equal(by_module[key(n)], v) for n, v in saved.items())


def test_private_adapter_ranked_and_loaded_with_the_token_skipped_without(world):
    with_token = select_adapter(world["target"], [world["private"], world["repos"][0]], token=READER)
    assert {row.candidate for row in with_token.ranking} == {world["private"], world["repos"][0]}
    assert with_token.skipped == []
    model = with_token.load(copy.deepcopy(world["base"]), top_k=2)  # PEFT downloads with the token too
    name = "private_lora"
    assert name in model.peft_config
    assert same_weights(lora_state(model, name), saved_state(world["adapters"][1]))

    without = select_adapter(world["target"], [world["private"], world["repos"][0]])  # HF_TOKEN: not granted
    assert [row.candidate for row in without.ranking] == [world["repos"][0]]
    reason = {s.candidate: s.reason for s in without.skipped}[world["private"]]
    assert "not found" in reason and "private repo needs a token" in reason

    discovered = select_adapter(world["target"], base_model=BASE, token=READER)  # the listing sees it too
    assert {row.candidate for row in discovered.ranking} == {*world["repos"], world["private"]}
    assert {row.candidate for row in select_adapter(world["target"], base_model=BASE).ranking} == set(world["repos"])


def test_select_cli_takes_the_token(world, tmp_path, capsys):
    from fisherhub.cli import main

    target = tmp_path / "target.safetensors"
    world["target"].save(target)
    assert main(["select", str(target), world["private"], world["repos"][0], "--token", READER]) == 0
    shown = capsys.readouterr().out
    assert world["private"] in shown and "skipped" not in shown
    assert main(["select", str(target), world["private"], world["repos"][0]]) == 0
    assert "private repo needs a token" in " ".join(capsys.readouterr().out.split())  # wrapped to the terminal


def test_adapter_in_a_subfolder_ranked_and_loaded(world):
    short, uri = "handoff/many-adapters:domain-1", "hf://handoff/many-adapters/domain-1"
    selection = select_adapter(world["target"], [short, uri, "handoff/many-adapters:no-such-folder"])
    assert {row.candidate for row in selection.ranking} == {short, uri}
    scores = {row.candidate: row.score for row in selection.ranking}
    assert scores[short] == scores[uri]
    assert all(row.adapter.subfolder == "domain-1" and len(row.adapter.revision) == 40 for row in selection.ranking)
    assert "no adapter_config.json" in selection.skipped[0].reason and "no-such-folder" in selection.skipped[0].reason
    alone = select_adapter(world["target"], [world["repos"][1]])
    assert math.isclose(scores[short], alone.best.score, rel_tol=1e-9)  # the same signature as the root adapter's
    model = selection.load(copy.deepcopy(world["base"]))
    assert same_weights(lora_state(model, "many_adapters_domain_1"), saved_state(world["adapters"][1]))


def test_base_model_read_from_the_adapter_config(world, hub_server):
    """The card names no base model; the config names another one: skipped, saying which. Each candidate's
    config is read once (HEAD + GET, or HEAD alone when cached) with peft.PeftConfig, for its adapter type."""
    assert b"base_model" not in hub_server.files("handoff/other-base-lora")["README.md"]
    requests = len(hub_server.requests)
    selection = select_adapter(world["target"], ["handoff/other-base-lora", world["repos"][0]], base_model=BASE)
    assert [row.candidate for row in selection.ranking] == [world["repos"][0]]
    config_reads = [path for _, path, _ in hub_server.requests[requests:] if path.endswith("/adapter_config.json")]
    for repo in ("handoff/other-base-lora", world["repos"][0]):
        assert 1 <= sum(f"/{repo}/" in path for path in config_reads) <= 2  # HEAD + GET
    reason = selection.skipped[0].reason
    assert "other base model" in reason and "org/another-base" in reason and BASE in reason
    with pytest.raises(NoCompatibleCandidatesError, match="org/another-base"):
        select_adapter(world["target"], ["handoff/other-base-lora"], base_model=BASE)


def test_mixing_weights_mapping():
    weights = mixing_weights([0.9, 0.6, 0.3, 0.15], [0.1, 0.05, 0.1, 0.1], temperature=1.0)
    assert weights[3] == 0.0  # 0.15 is not above 2 standard errors
    assert math.isclose(sum(weights), 1.0)
    assert (
        math.isclose(weights[0], 0.5)
        and math.isclose(weights[1] / weights[0], 2 / 3)
        and math.isclose(weights[2], 1 / 6)
    )
    sharp = mixing_weights([0.9, 0.6], [0.1, 0.1], temperature=0.5)
    assert math.isclose(sharp[1] / sharp[0], (2 / 3) ** 2)
    assert mixing_weights([0.9, 0.8], [0.1, 0.1], temperature=1e-3)[1] < 1e-40
    assert math.isclose(mixing_weights([0.9, 0.8], [0.1, 0.1], temperature=1e6)[0], 0.5, rel_tol=1e-5)
    with pytest.raises(InputError, match="nothing to mix"):
        mixing_weights([0.1, 0.05], [0.1, 0.1])
    with pytest.raises(InputError, match="temperature"):
        mixing_weights([0.9], [0.1], temperature=0)


def test_mix_hands_the_top_k_to_add_weighted_adapter(world):
    selection = select_adapter(world["target"], world["repos"])
    weights = selection.weights()
    assert list(weights) == [row.candidate for row in selection.ranking] and all(w > 0 for w in weights.values())
    assert math.isclose(sum(weights.values()), 1.0)
    names = {repo: f"lora_{repo[-1]}" for repo in world["repos"]}
    for combination in ("cat", "linear"):
        model = selection.mix(copy.deepcopy(world["base"]), top_k=2, combination_type=combination)
        assert model.active_adapter == "mix"
        layer = model.base_model.model.model.layers[0].self_attn.q_proj
        mixed = layer.get_delta_weight("mix")
        if combination == "cat":  # the stacked factors: exactly the weighted sum of the updates
            expected = sum(w * layer.get_delta_weight(names[repo]) for repo, w in weights.items())
        else:  # summed factors, each scaled by sqrt(w s): cross terms B_i A_j
            root = {repo: math.sqrt(w * layer.scaling[names[repo]]) for repo, w in weights.items()}
            b = sum(root[r] * layer.lora_B[names[r]].weight for r in weights)
            a = sum(root[r] * layer.lora_A[names[r]].weight for r in weights)
            expected = (b @ a) * layer.scaling["mix"]
            assert not torch.allclose(mixed, sum(w * layer.get_delta_weight(names[r]) for r, w in weights.items()))
        assert torch.allclose(mixed, expected, atol=1e-6)
    with pytest.raises(InputError, match="combination_type"):
        selection.mix(copy.deepcopy(world["base"]), combination_type="svd")
