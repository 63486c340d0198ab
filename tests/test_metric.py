"""The evaluate metric ``fisher_alignment``: path load, agreement with ``fisherhub.alignment``, texts mode, errors,
and the Space (``tests/test_metric_install.py``: what ``fisherhub install-metric`` installs)."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fisherhub.testing.oracles import synthetic_task

from fisherhub.core.batch import HeadBatch
from fisherhub import SketchSpec, SketchState, alignment
from fisherhub.core.errors import IncompatibleSignaturesError, InputError
from fisherhub.metric import METRIC_NAME, metric_path

REPO_ROOT = Path(__file__).resolve().parent.parent
SPEC = SketchSpec(d=8, vocab_size=48, m=256)
OUTPUT_KEYS = ("fisher_alignment", "activation_alignment", "error_alignment", "coupling", "stderr")


@pytest.fixture(scope="module")
def signature_files(tmp_path_factory) -> dict[str, str]:
    """Two compatible tasks (disjoint label blocks), and one sketched with another seed."""
    folder = tmp_path_factory.mktemp("signatures")
    tasks = {
        "first": (SPEC, synthetic_task(400, 8, 48, seed=1, label_block=(0, 30))),
        "second": (SPEC, synthetic_task(400, 8, 48, seed=2, label_block=(18, 48))),
        "other_seed": (SketchSpec(d=8, vocab_size=48, m=256, seed=1), synthetic_task(400, 8, 48, seed=1)),
    }
    paths = {}
    for name, (spec, (activations, errors)) in tasks.items():
        paths[name] = str(folder / f"{name}.safetensors")
        state = SketchState(spec).update(
            HeadBatch(activations=activations, doc_index=torch.arange(len(activations)), errors=errors)
        )
        state.finalize({"base_model": "tester/tiny-lm", "dataset": f"tester/{name}"}).save(paths[name])
    return paths


@pytest.fixture(scope="module")
def metric():
    import evaluate

    return evaluate.load(metric_path(), keep_in_memory=True)


def _expected(source: str, target: str) -> dict:
    from fisherhub import Signature

    return alignment(Signature.load(source), Signature.load(target)).as_dict()


def _assert_matches_library(results: dict, pairs: list[tuple[str, str]]) -> None:
    expected = [_expected(source, target) for source, target in pairs]
    for key, field in zip(OUTPUT_KEYS, ("fisher", "activation", "error", "coupling", "stderr")):
        assert results[key] == [e[field] for e in expected], key
    assert results["sketch_id"] == SPEC.sketch_id


def _python(code: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)


def _fresh_env(home: Path, **extra: str) -> dict[str, str]:
    """The test environment with a new, empty HF_HOME (so a new modules cache) and no download counting."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_MODULES_CACHE", "HF_EVALUATE_OFFLINE")}
    env.update(HF_HOME=str(home), HF_UPDATE_DOWNLOAD_COUNTS="0", OMP_WAIT_POLICY="PASSIVE", **extra)
    return env


_COMPUTE = """
import json, sys
import evaluate
pairs = json.loads(sys.argv[2])
module = evaluate.load(sys.argv[1])
results = module.compute(predictions=[p for p, _ in pairs], references=[r for _, r in pairs])
print("RESULT " + json.dumps({"results": results, "name": module.name, "file": sys.modules[type(module).__module__].__file__}))
"""


def _result(completed: subprocess.CompletedProcess) -> dict:
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")][-1]
    return json.loads(line.removeprefix("RESULT "))


def test_path_load_matches_library(metric, signature_files):
    pairs = [
        (signature_files["first"], signature_files["second"]),
        (signature_files["second"], signature_files["first"]),
        (signature_files["first"], signature_files["first"]),
    ]
    results = metric.compute(predictions=[p for p, _ in pairs], references=[r for _, r in pairs])
    _assert_matches_library(results, pairs)
    # disjoint label blocks overlap on 12 of 48 tokens: well below self-alignment
    assert results["fisher_alignment"][0] < 0.5 < results["fisher_alignment"][2] == 1.0


def test_doctest_example_runs():
    spec = importlib.util.spec_from_file_location("fisher_alignment_doctest", metric_path())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    outcome = doctest.testmod(module)
    assert outcome.attempted >= 10 and outcome.failed == 0


def test_bad_refs_raise_input_error(metric, signature_files, tmp_path):
    missing = str(tmp_path / "missing.safetensors")
    with pytest.raises(InputError, match=r"missing\.safetensors.*`references`.*no such file, and not a Hub reference"):
        metric.compute(predictions=[signature_files["first"]], references=[missing])
    not_a_signature = tmp_path / "notes.safetensors"
    not_a_signature.write_text("hello")
    with pytest.raises(InputError, match=r"notes\.safetensors.*`predictions`"):
        metric.compute(predictions=[str(not_a_signature)], references=[signature_files["first"]])


def test_hub_refs(metric, signature_files, hub, hf_api, hf_hub_cache):
    from fisherhub import Signature
    from fisherhub.hub import push_signature

    for name in ("first", "second"):
        hf_api.create_repo(f"tester/{name}", repo_type="dataset")
        push_signature(Signature.load(signature_files[name]), f"datasets/tester/{name}")
    results = metric.compute(predictions=["datasets/tester/first"], references=["datasets/tester/second"])
    _assert_matches_library(results, [(signature_files["first"], signature_files["second"])])
    with pytest.raises(InputError, match=r"datasets/tester/absent.*`predictions`"):
        metric.compute(predictions=["datasets/tester/absent"], references=["datasets/tester/first"])


def test_incompatible_signatures_name_refs_and_fields(metric, signature_files):
    with pytest.raises(IncompatibleSignaturesError, match=r"other_seed\.safetensors.*differing fields: seed: 0 vs 1"):
        metric.compute(
            predictions=[signature_files["first"], signature_files["first"]],
            references=[signature_files["second"], signature_files["other_seed"]],
        )


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory) -> str:
    from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny_llama")
    tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64).save_pretrained(folder)
    tiny_tokenizer(64).save_pretrained(folder)
    return str(folder)


PROSE = [f"the {w} sat on the mat and ate {n} rats." for n in range(12) for w in ("cat", "dog")]
ARITHMETIC = [f"{a}+{b}={a + b}; {a}*{b}={a * b}" for a in range(6) for b in range(4)]


def test_texts_mode_sketches_both_sides_with_the_library(metric, tiny_model_folder):
    from fisherhub.lm.specs import spec_for_model
    from fisherhub.lm.loading import load_model_and_tokenizer
    from fisherhub.pipeline.loop import sketch_texts

    options = {"model_id": tiny_model_folder, "m": 256, "seed": 3, "batch_size": 8, "max_length": 64, "device": "cpu"}
    flat = metric.compute(predictions=PROSE, references=ARITHMETIC, **options)
    nested = metric.compute(predictions=[PROSE, PROSE], references=[ARITHMETIC[:10], PROSE], **options)

    model, tokenizer = load_model_and_tokenizer(tiny_model_folder)
    spec = spec_for_model(model, tokenizer, m=256, seed=3)
    prose, arithmetic, arithmetic_10 = (
        sketch_texts(texts, model, tokenizer, spec, batch_size=8, max_length=64)
        for texts in (PROSE, ARITHMETIC, ARITHMETIC[:10])
    )
    expected = [alignment(prose, arithmetic), alignment(prose, arithmetic_10), alignment(prose, prose)]
    assert flat["sketch_id"] == nested["sketch_id"] == spec.sketch_id
    for key, field in zip(OUTPUT_KEYS, ("fisher", "activation", "error", "coupling", "stderr")):
        assert flat[key] == [getattr(expected[0], field)], key
        assert nested[key] == [getattr(expected[1], field), getattr(expected[2], field)], key
    assert nested["fisher_alignment"][1] == 1.0 and flat["fisher_alignment"][0] < 1.0


def test_texts_without_model_id_or_empty_inputs_raise(metric):
    with pytest.raises(InputError, match="no pairs given"):
        metric.compute(predictions=[], references=[])
    with pytest.raises(InputError, match="model_id"):
        metric.compute(predictions=[["a text", "another"]], references=[["more", "texts"]])


@pytest.mark.slow
def test_space_folder_pushes_and_loads_from_hub(hub, tmp_path, signature_files):
    spec = importlib.util.spec_from_file_location("push_metric_space", REPO_ROOT / "scripts" / "push_metric_space.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--namespace", "tester"]) == 0

    repo_id = f"tester/{METRIC_NAME}"
    files = hub.files(repo_id, "space")
    assert {"README.md", "app.py", f"{METRIC_NAME}.py", "requirements.txt"} <= set(files)
    assert hub.repo(repo_id, "space").sdk == "gradio"
    assert files[f"{METRIC_NAME}.py"] == Path(metric_path()).read_bytes()
    card = files["README.md"].decode()
    assert card.startswith("---\n") and "sdk: gradio" in card and "app_file: app.py" in card
    assert "- evaluate\n- metric\n" in card
    assert b"build_metric_app" in files["app.py"] and b"fisherhub[space]" in files["requirements.txt"]

    env = _fresh_env(tmp_path / "hf_home", HF_ENDPOINT=hub.endpoint)
    pairs = [(signature_files["first"], signature_files["second"])]
    loaded = _result(_python(_COMPUTE, repo_id, json.dumps(pairs), env=env))
    assert "tester--fisher_alignment" in loaded["file"]
    _assert_matches_library(loaded["results"], pairs)
