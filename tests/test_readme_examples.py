"""The README's examples run as written: its code blocks are read from README.md and run, with the embedded default
model replaced by a tiny random Llama in its cache folder (``$FISHERHUB_CACHE``, the ``embedded_model`` fixture)
and the Hub by the local server. A block may use only the names the README says are the reader's own data
(``source_texts``, ``target_texts``; ``train``, ``peft_model`` and ``tokenizer`` for the training examples).

The TRL example is not run (TRL is no dependency); the plain Trainer one beside it is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from test_embedded_model import DOMAINS, embedded_model, readme_python_block  # noqa: F401 (a fixture)

from fisherhub import Signature

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def readme_block(heading: str, language: str) -> str:
    """The first ```language block after ``heading``."""
    text = README.read_text()
    match = re.search(rf"```{language}\n(.*?)```", text[text.index(heading) :], flags=re.DOTALL)
    assert match, f"no {language} block after {heading!r} in README.md"
    return match.group(1)


def run_bash(block: str, folder: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``block`` run by bash in ``folder``, which sees the checkout's ``src/`` as the README's commands do (they
    run from the checkout); the ``fisherhub`` and ``accelerate`` commands of this Python, this tree's code; ``env``
    added to the environment."""
    if not (folder / "src").exists():
        (folder / "src").symlink_to(REPO / "src")
    environment = {
        **os.environ,
        **(env or {}),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO / "src"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_set_up_commands_upgrade_pip_first():
    """A new venv's pip (23.2 with Python 3.11) shows no License-Expression or Project-URL home page in
    ``pip show fisherhub``; the set-up commands upgrade it before anything else."""
    for heading in ("Set up and run the main job", "Set up and run the tests"):
        assert readme_block(heading, "bash").startswith("pip install -U pip && pip install torch==2.13.0 && "), heading


def test_using_it_runs_as_written_on_the_readers_texts(embedded_model, tmp_path, monkeypatch):  # noqa: F811 (the fixture)
    monkeypatch.chdir(tmp_path)
    namespace = {"source_texts": DOMAINS["prose"], "target_texts": DOMAINS["code"]}
    exec(readme_python_block("## Using it"), namespace)
    assert Signature.load(tmp_path / "source.safetensors").num_documents == len(DOMAINS["prose"])
    assert -1 < namespace["r"].fisher < 1


def test_distributed_runs_as_written_and_compare_says_same_data(embedded_model, tmp_path):  # noqa: F811 (the fixture)
    result = run_bash(readme_block("### Distributed runs", "bash"), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = (Signature.load(tmp_path / name) for name in ("prose.safetensors", "prose-2proc.safetensors"))
    assert one.num_documents == two.num_documents == 24 and one.num_tokens == two.num_tokens
    assert "same data" in result.stdout
    assert "note: prose and prose-2proc are sketches of the same data" in " ".join(result.stdout.split())


def test_the_plain_trainer_example_runs_as_written(embedded_model, hub, tmp_path, monkeypatch):  # noqa: F811 (the fixture)
    """The reader's ``train`` (a dataset with a text column), ``peft_model`` and ``tokenizer``; the Trainer pushes to
    the local Hub server."""
    import datasets
    from huggingface_hub import HfApi
    from peft import LoraConfig, get_peft_model

    from fisherhub.hub.listing import INDEX_PATH
    from fisherhub.lm.loading import load_model_and_tokenizer

    monkeypatch.chdir(tmp_path)
    model, tokenizer = load_model_and_tokenizer(None)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    namespace = {
        "train": datasets.Dataset.from_dict({"text": DOMAINS["prose"]}),
        "peft_model": peft_model,
        "tokenizer": tokenizer,
    }
    exec(readme_block("With the plain `transformers` `Trainer`", "python"), namespace)
    assert (tmp_path / "my-lora" / INDEX_PATH).is_file()
    pushed = HfApi().list_repo_files("me/my-lora")
    assert INDEX_PATH in pushed and not [name for name in pushed if name.startswith(".cache")]  # the push lock stays
    assert (tmp_path / "my-lora" / ".cache" / "huggingface" / "fisher_signatures.lock").is_file()


def test_the_hub_examples_run_as_written_against_the_local_hub(embedded_model, tmp_path):  # noqa: F811 (the fixture)
    """Issue 32: the README never said how to try the Hub workflow without the Hub. ``fisherhub hub serve`` prints
    what the README shows, and the README's Hub examples run as written against it: the walkthrough, then the
    index commands of "Ranking every adapter of a base model"."""
    from test_hub_server import serve, stop

    shown = readme_block("### Trying the Hub workflow without the Hub", "console")
    process, printed = serve(tmp_path / "local-hub")
    try:
        assert [line.split("=")[0] for line in shown.splitlines() if line.startswith("export ")] == [
            f"export {name}" for name in printed
        ]
        walkthrough = run_bash(readme_block("### Trying the Hub workflow without the Hub", "bash"), tmp_path, printed)
        assert walkthrough.returncode == 0, walkthrough.stderr[-3000:]
        out = walkthrough.stdout
        assert "datasets/me/python-code@" in out and (tmp_path / "pulled.safetensors").is_file()
        ranked = [line.split()[1] for line in out.splitlines() if re.match(r"\d+ +me/lora-", line)]
        assert sorted(ranked) == ["me/lora-code", "me/lora-prose"], out
        lines = out.splitlines()
        table = lines[next(i for i, line in enumerate(lines) if line.startswith("#  candidate")) :]
        assert any(line.startswith("best: me/lora-") for line in table) and max(map(len, table)) <= 100  # 100 columns
        index = run_bash(readme_block("### Ranking every adapter of a base model", "bash"), tmp_path, printed)
        assert index.returncode == 0, index.stderr[-3000:]
        assert (tmp_path / "rows.png").is_file() and "me/lora-code" in index.stdout
    finally:
        stop(process)
