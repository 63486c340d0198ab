"""Entry points of an installed wheel: ``fisherhub``, ``python -m fisherhub``, ``python -m fisherhub.cli.commands.sketch``
and ``accelerate launch -m fisherhub sketch`` (2 processes) run the same sketcher as ``scripts/sketch.py``.

The wheel is built from a copy of this source tree and installed with ``--no-deps`` into a fresh venv that
sees this interpreter's site-packages (for torch, transformers, ...; a system python's or a venv's, as in
``.ci/run``), so these tests use the installed package, not the checkout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer
from sketch_helpers import LAUNCH_TWO_CPU_PROCESSES
from wheel_build import REPO, build_wheel, see_these_site_packages
from wheel_build import run_clean as _run

from fisherhub import Signature

pytestmark = pytest.mark.slow

TEXTS = [f"doc {i}: " + ("a quick brown fox " if i % 3 else "lazy dogs sleep ") * (1 + i % 4) for i in range(12)]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv with the wheel of this tree installed."""
    root = tmp_path_factory.mktemp("installed")
    wheel = build_wheel(root)
    venv = root / "venv"
    created = _run([sys.executable, "-m", "venv", str(venv)], cwd=root)
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    see_these_site_packages(python)
    # --ignore-installed: the system may have fisherhub (e.g. an editable checkout) of the same version
    pip = _run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
        cwd=root,
    )
    assert pip.returncode == 0, pip.stderr
    where = _run([str(python), "-c", "import fisherhub; print(fisherhub.__file__)"], cwd=root)
    assert where.stdout.strip().startswith(str(venv)), where.stdout + where.stderr
    return python


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-entry")
    tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64).save_pretrained(folder / "model")
    tiny_tokenizer(64).save_pretrained(folder / "model")
    (folder / "docs.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS))
    return folder


def sketch_options(folder: Path, name: str) -> list[str]:
    return [
        "--dataset",
        str(folder / "docs.jsonl"),
        "--model",
        str(folder / "model"),
        "-m",
        "256",
        "--batch-size",
        "1",
        "--no-progress",
        "--cpu",
        "--output",
        str(folder / f"{name}.safetensors"),
    ]


@pytest.fixture(scope="module")
def reference(tiny) -> Signature:
    """The signature ``scripts/sketch.py`` writes from the checkout."""
    result = _run(
        [sys.executable, str(REPO / "scripts" / "sketch.py"), *sketch_options(tiny, "script")], cwd=tiny, checkout=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return Signature.load(tiny / "script.safetensors")


def assert_same_signature(signature: Signature, reference: Signature) -> None:
    assert signature.sketch_id == reference.sketch_id
    assert (signature.num_tokens, signature.num_documents) == (reference.num_tokens, reference.num_documents)
    for name in ("joint", "activation", "error", "split_norms"):
        assert torch.equal(getattr(signature, name), getattr(reference, name)), name


def test_console_script_help(installed):
    result = _run([str(installed.parent / "fisherhub"), "--help"], cwd=installed.parent)
    assert result.returncode == 0, result.stderr
    assert "sketch" in result.stdout and "install-metric" in result.stdout


@pytest.mark.parametrize("module", ["fisherhub", "fisherhub.cli.commands.sketch"])
def test_python_m_runs_the_sketcher(installed, tiny, reference, module):
    prefix = [str(installed), "-m", *(["fisherhub", "sketch"] if module == "fisherhub" else [module])]
    result = _run([*prefix, *sketch_options(tiny, module)], cwd=tiny)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "wrote" in result.stdout
    assert_same_signature(Signature.load(tiny / f"{module}.safetensors"), reference)


def test_accelerate_launch_two_processes_gives_the_one_process_signature(installed, tiny, reference):
    launch = [str(installed), *LAUNCH_TWO_CPU_PROCESSES]
    checkpoint = tiny / "launch2-checkpoint"
    result = _run(
        [
            *launch,
            "-m",
            "fisherhub",
            "sketch",
            *sketch_options(tiny, "launch2"),
            "--checkpoint",
            str(checkpoint),
            "--keep-checkpoint",
        ],
        cwd=tiny,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(path.name for path in checkpoint.glob("*.json")) == ["rank0-of2.json", "rank1-of2.json"]
    assert result.stdout.count("wrote") == 1  # only the main process writes
    signature = Signature.load(tiny / "launch2.safetensors")
    assert signature.sketch_id == reference.sketch_id
    assert (signature.num_tokens, signature.num_documents) == (reference.num_tokens, reference.num_documents)
    torch.testing.assert_close(signature.split_norms, reference.split_norms, rtol=1e-9, atol=0)
    torch.testing.assert_close(signature.joint, reference.joint, rtol=1e-6, atol=1e-7)
