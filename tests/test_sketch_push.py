"""`fisherhub sketch --push-to-hub`: the signature written locally is the one on the Hub."""

from __future__ import annotations

import json

from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub import Signature
from fisherhub.cli import main
from fisherhub.hub import list_signatures, load_signature
from fisherhub.hub.listing import published


def test_sketch_cli_pushes_to_a_dataset_repo(tmp_path, hub):
    model, tokenizer = tiny_causal_lm("llama", tie_word_embeddings=True, vocab_size=64), tiny_tokenizer(64)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i}: the cat sat on the mat"}) + "\n" for i in range(40)))
    output = tmp_path / "sig.safetensors"
    status = main(
        [
            "sketch",
            "--model",
            str(tmp_path / "model"),
            "--dataset",
            str(data),
            "--m",
            "256",
            "--cpu",
            "--output",
            str(output),
            "--push-to-hub",
            "datasets/tester/cats",
            "--no-progress",
        ]
    )
    assert status == 0
    (info,) = list_signatures("tester/cats", repo_type="dataset")
    assert info.num_tokens == Signature.load(output).num_tokens > 0
    # what is published names the model folder and data file, not their local paths
    assert load_signature("datasets/tester/cats").to_bytes() == published(Signature.load(output)).to_bytes()


def test_push_cli_refuses_a_missing_repo_unless_asked_to_create_it(tmp_path, hub, capsys):
    from fisherhub.testing.oracles import sketch, synthetic_task

    from fisherhub import SketchSpec

    signature = sketch(SketchSpec(d=8, vocab_size=64, m=128), *synthetic_task(200, 8, 64, seed=0))
    signature.metadata["base_model"] = "org/base"
    path = tmp_path / "sig.safetensors"
    signature.save(path)
    assert main(["push", str(path), "datasets/tester/new"]) == 1
    assert "repository not found" in capsys.readouterr().err
    assert main(["push", str(path), "datasets/tester/new", "--create-repo"]) == 0
    assert load_signature("datasets/tester/new").to_bytes() == path.read_bytes()
