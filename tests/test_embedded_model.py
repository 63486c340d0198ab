"""The embedded default model has one identity: what signatures record, what PEFT adapters trained on it record,
and what selection and the metric accept; the README's selection example runs offline as written.

The embedded model's converted cache folder is filled with a tiny random Llama (the default's architecture) and a
character tokenizer, under ``$FISHERHUB_CACHE``, so ``load_model_and_tokenizer(None)`` takes its ordinary path
(nothing converted, nothing downloaded). The local Hub server does not hold ``HuggingFaceTB/SmolLM2-135M-Instruct``:
any attempt to fetch it fails the test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub import Signature
from fisherhub.cli import main
from fisherhub.lm.loading import (
    DEFAULT_MODEL_ID,
    DEFAULT_MODEL_REVISION,
    default_model_folder,
    load_model_and_tokenizer,
)

VOCAB_SIZE = 96
M = 512
README = Path(__file__).resolve().parents[1] / "README.md"
DOMAINS = {
    "prose": [
        f"the {w} walked along the river for {n} hours, thinking of home."
        for n in range(20)
        for w in ("cat", "old man")
    ],
    "code": [f"def f{n}(x):\n    return [x * {n} for x in range({n})]\n" for n in range(40)],
    "digits": [" ".join(str(n * k % 97) for k in range(14)) for n in range(40)],
}
#: an adapter trained elsewhere (or before the embedded model was named by its id) records that machine's folder
OTHER_MACHINES_FOLDER = "/home/someone/.cache/fisherhub/models/" + "SmolLM2-135M-Instruct-Q4_1-float32"


@pytest.fixture
def embedded_model(tmp_path, monkeypatch):
    """The embedded model's cache folder holding a tiny random Llama; returns the folder."""
    monkeypatch.setenv("FISHERHUB_CACHE", str(tmp_path / "fisherhub-cache"))
    folder = default_model_folder()
    tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=VOCAB_SIZE).save_pretrained(folder)
    tiny_tokenizer(VOCAB_SIZE).save_pretrained(folder)
    return folder


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


def sketch_with_cli(data: Path, output: Path) -> Signature:
    assert main(["sketch", "--dataset", str(data), "-m", str(M), "-o", str(output), "--no-progress", "--cpu"]) == 0
    return Signature.load(output)


def save_adapter(folder: Path, seed: int) -> dict:
    """A LoRA adapter made with PEFT on the model ``load_model_and_tokenizer(None)`` returns; its config."""
    import torch
    from peft import LoraConfig, get_peft_model

    model, _ = load_model_and_tokenizer(None)
    torch.manual_seed(seed)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(folder)
    return json.loads((folder / "adapter_config.json").read_text())


def attach_signature(adapter: Path, signature_file: Path) -> None:
    (adapter / ".fisher_signatures").mkdir(exist_ok=True)
    (adapter / ".fisher_signatures" / signature_file.name).write_bytes(signature_file.read_bytes())


def readme_python_block(heading: str) -> str:
    """The first ```python block after ``heading`` in the README."""
    text = README.read_text()
    start = text.index(heading)
    match = re.search(r"```python\n(.*?)```", text[start:], flags=re.DOTALL)
    assert match, f"no python block after {heading!r} in README.md"
    return match.group(1)


def test_the_loaded_default_is_named_by_its_id_and_peft_records_it(embedded_model, tmp_path):
    model, tokenizer = load_model_and_tokenizer(None)
    assert model.config.name_or_path == model.name_or_path == tokenizer.name_or_path == DEFAULT_MODEL_ID
    config = save_adapter(tmp_path / "adapter", seed=0)
    assert config["base_model_name_or_path"] == DEFAULT_MODEL_ID
    # every name of the embedded model loads it (no Hub lookup: the local Hub does not hold the id)
    for name, revision in (
        (str(embedded_model), None),
        (OTHER_MACHINES_FOLDER, None),
        (DEFAULT_MODEL_ID, DEFAULT_MODEL_REVISION),
    ):
        loaded, _ = load_model_and_tokenizer(name, revision=revision)
        assert loaded.name_or_path == DEFAULT_MODEL_ID, name


def test_readme_selection_example_runs_offline_as_written(embedded_model, hub, tmp_path, monkeypatch):
    from peft import PeftModel

    from fisherhub.hub import push_signature

    monkeypatch.chdir(tmp_path)
    candidates = {"org/lora-a": "prose", "org/lora-b": "digits", "./my-adapter": "code"}
    for seed, (candidate, domain) in enumerate(candidates.items()):
        signature_file = tmp_path / f"{domain}.safetensors"
        signature = sketch_with_cli(write_jsonl(tmp_path / f"{domain}.jsonl", DOMAINS[domain]), signature_file)
        assert signature.metadata["base_model"] == DEFAULT_MODEL_ID
        folder = tmp_path / candidate.removeprefix("./").replace("/", "--")
        assert save_adapter(folder, seed)["base_model_name_or_path"] == DEFAULT_MODEL_ID
        if candidate.startswith("./"):
            attach_signature(folder, signature_file)
        else:
            from huggingface_hub import HfApi

            HfApi().create_repo(candidate)
            HfApi().upload_folder(repo_id=candidate, folder_path=folder)
            push_signature(signature, candidate, repo_type="model")
    assert not any(repo_id == DEFAULT_MODEL_ID for _, repo_id in hub.repos)

    # the README's snippet as written, on its own: choose an adapter for the reader's target texts
    from fisherhub.selection import select_adapter

    namespace = {"target_texts": [text.replace("x", "y") for text in DOMAINS["code"]]}
    exec(readme_python_block("### Choosing an adapter"), namespace)

    selection = namespace["selection"]
    assert selection.skipped == []
    # target texts: the default second stage measured all three adapters (random LoRA weights here) on them
    measured = selection.rerank.lowest_first()
    assert selection.rerank.budget == 4 and len(measured) == 3 and selection.best.candidate == measured[0].candidate
    first_stage = select_adapter(namespace["target_texts"], list(candidates), base_model=DEFAULT_MODEL_ID, rerank=0)
    assert Path(first_stage.best.candidate) == Path("my-adapter")  # signed with the code domain's data
    assert isinstance(namespace["peft_model"], PeftModel)
    configs = namespace["peft_model"].peft_config.values()  # the best adapter, loaded
    assert [config.base_model_name_or_path for config in configs] == [DEFAULT_MODEL_ID]

    # discovery on the Hub by any name of the embedded model finds the adapters PEFT tagged with its id
    discovered = select_adapter(namespace["target_texts"], None, base_model=str(embedded_model))
    assert sorted(row.candidate for row in discovered.ranking) == ["org/lora-a", "org/lora-b"]


@pytest.mark.usefixtures("wide_terminal")
def test_cli_select_offline_with_the_embedded_model_and_an_adapter_naming_its_folder(embedded_model, tmp_path, capsys):
    code_a, code_b = DOMAINS["code"][:20], DOMAINS["code"][20:]
    signature_file = tmp_path / "code_a.safetensors"
    sketch_with_cli(write_jsonl(tmp_path / "code_a.jsonl", code_a), signature_file)
    for name, base in (("adapter", None), ("old-adapter", OTHER_MACHINES_FOLDER)):
        adapter = tmp_path / name
        save_adapter(adapter, seed=1)
        if base is not None:  # as PEFT recorded it before the embedded model was named by its id
            config = json.loads((adapter / "adapter_config.json").read_text())
            (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": base}))
        attach_signature(adapter, signature_file)
    capsys.readouterr()

    target = write_jsonl(tmp_path / "code_b.jsonl", code_b)
    assert main(["select", str(target), str(tmp_path / "adapter"), str(tmp_path / "old-adapter")]) == 0
    printed = capsys.readouterr().out
    assert "skipped" not in printed and "best: " in printed
    assert str(tmp_path / "old-adapter") in printed
    # the base model given by any of its names
    for base_model in (DEFAULT_MODEL_ID, str(embedded_model), OTHER_MACHINES_FOLDER, DEFAULT_MODEL_REVISION):
        assert main(["select", str(target), str(tmp_path / "adapter"), "--base-model", base_model]) == 0, base_model
        assert "skipped" not in capsys.readouterr().out


def test_metric_texts_mode_names_the_embedded_model_default(embedded_model):
    import evaluate

    from fisherhub import alignment
    from fisherhub.lm.specs import spec_for_model
    from fisherhub.metric import metric_path
    from fisherhub.pipeline.loop import sketch_texts

    metric = evaluate.load(metric_path(), keep_in_memory=True)
    result = metric.compute(
        predictions=DOMAINS["prose"], references=DOMAINS["code"], model_id="default", m=M, max_length=64, device="cpu"
    )
    model, tokenizer = load_model_and_tokenizer(None)
    spec = spec_for_model(model, tokenizer, m=M)
    prose, code = (sketch_texts(DOMAINS[name], model, tokenizer, spec, max_length=64) for name in ("prose", "code"))
    assert result["sketch_id"] == spec.sketch_id
    assert result["fisher_alignment"] == [alignment(prose, code).fisher]
