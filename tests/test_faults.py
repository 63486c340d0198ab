"""Faults a careless or hostile user hits (issue 15): each test asserts the exact outcome, a refusal with
its message or the identical signature after a resume."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
import sketch_helpers
from sketch_helpers import LAUNCH_TWO_CPU_PROCESSES, REPO, run_script, sketch
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub.cli import main
from fisherhub.core.errors import InputError
from fisherhub.options import DataArgs, SketchArgs
from fisherhub.pipeline.loop import sketch_texts

TEXTS = [f"doc {i}: " + ("the quick brown fox " if i % 3 else "lazy dogs sleep ") * (1 + i % 4) for i in range(40)]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A folder with a tiny Qwen2 (untied head) and its tokenizer in ``model/``, and ``docs.jsonl``."""
    folder = tmp_path_factory.mktemp("faults")
    model, tokenizer = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    write_jsonl(folder / "docs.jsonl", TEXTS)
    return folder


def run_args(folder: Path, name: str, **overrides) -> SketchArgs:
    """Small runs: m = 64, 4 documents a batch."""
    return sketch_helpers.run_args(folder, name, **{"m": 64, "batch_size": 4, **overrides})


def assert_same_signature(a, b) -> None:
    for name in ("joint", "activation", "error", "split_norms"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert (a.num_tokens, a.num_documents, a.sketch_id) == (b.num_tokens, b.num_documents, b.sketch_id)


# -- 1: resume after the last checkpoint ----------------------------------------------------------------
def test_case1_resume_after_the_final_checkpoint_gives_the_same_signature(tiny):
    """A run killed after its final checkpoint (all 40 documents done) but before the output is written."""
    args = run_args(tiny, "final")
    complete = sketch(args)
    Path(args.output).unlink()  # as if killed between the final checkpoint and writing the output
    record = json.loads((Path(args.checkpoint) / "rank0-of1.json").read_text())
    assert record["next_index"] == len(TEXTS)
    resumed = sketch(dataclasses.replace(args, resume=True))
    assert_same_signature(resumed, complete)
    assert Path(args.output).is_file()


# -- 2: resume checks what it resumes --------------------------------------------------------------------
def test_case2_resume_refuses_a_replaced_data_file(tiny, tmp_path):
    """The data file is replaced between the kill and ``--resume``: refused, naming the dataset fingerprint."""
    data = write_jsonl(tmp_path / "replaced.jsonl", TEXTS)
    args = run_args(tmp_path, "replaced", data=DataArgs(str(data)), model=str(tiny / "model"))
    sketch(args)
    write_jsonl(data, [text.upper() for text in TEXTS] * 2)
    with pytest.raises(
        InputError,
        match=r"different run \(differs in \['dataset_fingerprint'\]\): dataset_fingerprint "
        r"'\w+' in the checkpoint, '\w+' now",
    ):
        sketch(dataclasses.replace(args, resume=True))


def test_case2_resume_refuses_another_model_dtype(tiny):
    """The sketch id is the same in bfloat16 (case 4: the head checksum is of the weights as stored)."""
    args = run_args(tiny, "dtype")
    sketch(args)
    with pytest.raises(
        InputError,
        match=r"differs in \['model_dtype'\]\): model_dtype 'auto' in the checkpoint, "
        r"'bfloat16' now",
    ):
        sketch(dataclasses.replace(args, resume=True, dtype="bfloat16"))


def test_case2_resume_of_a_two_process_checkpoint_with_one_process_is_refused(tiny):
    """A checkpoint written by 2 processes (``accelerate launch``) resumed by 1 process does not restart from 0."""
    args = run_args(tiny, "two")
    result = run_script(LAUNCH_TWO_CPU_PROCESSES, args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(path.name for path in Path(args.checkpoint).glob("*.json")) == ["rank0-of2.json", "rank1-of2.json"]
    Path(args.output).unlink()
    with pytest.raises(
        InputError,
        match=r"was written by 2 processes \(rank0-of2.json, rank1-of2.json\); resume it "
        r"with 2 processes \(accelerate launch --num_processes 2\), or start over in a new --checkpoint folder",
    ):
        sketch(dataclasses.replace(args, resume=True))
    assert not Path(args.output).exists()


def test_a_launch_that_starts_fewer_processes_than_asked_says_so(tiny):
    """``accelerate launch --num_processes 2`` without ``--multi_gpu`` (the form the script's docstring once gave)
    starts one process on a machine without 2 GPUs: the run warns, naming both numbers and the launch that starts
    two; the CPU form the docstring gives now is the one the tests launch (``LAUNCH_TWO_CPU_PROCESSES``)."""
    asked_only = [word for word in LAUNCH_TWO_CPU_PROCESSES if word != "--multi_gpu"]
    args = run_args(tiny, "asked-two")
    result = run_script(asked_only, args, env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(path.name for path in Path(args.checkpoint).glob("*.json")) == ["rank0-of1.json"]  # one process
    warning = " ".join(line for line in result.stderr.splitlines() if line.startswith("warning: accelerate launch"))
    assert warning.startswith("warning: accelerate launch was asked for 2 processes but started 1: ")
    assert f"accelerate launch {' '.join(LAUNCH_TWO_CPU_PROCESSES[2:])} -m fisherhub sketch --cpu" in warning
    documented = " ".join((REPO / "scripts" / "sketch.py").read_text().replace("\\\n", " ").split())
    assert (
        f"accelerate launch {' '.join(LAUNCH_TWO_CPU_PROCESSES[2:]).replace(' 2 ', ' N ', 1)} scripts/sketch.py --cpu"
        in documented
    )


# -- 7: NaN / inf in the model -----------------------------------------------------------------------------
def nan_model(where: str):
    model = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=64)
    with torch.no_grad():
        if where == "head":
            model.lm_head.weight[3, 2] = float("nan")
        else:
            model.model.layers[0].mlp.down_proj.weight[0, 0] = float("inf")
    return model


NON_FINITE = r"the model computes NaN or inf {} \(float32 weights\): check its weights \(torch.isfinite over model.parameters\(\)\)"


@pytest.mark.parametrize(
    ("where", "reflection", "found"),
    [
        ("head", False, "logits"),
        ("head", True, "logits"),
        ("layer", False, "logits"),
        ("layer", True, "head inputs"),
    ],
)
def test_case7_nan_or_inf_in_the_model_is_named(where, reflection, found):
    with pytest.raises(InputError, match=NON_FINITE.format(found)):
        sketch_texts(TEXTS[:6], nan_model(where), tiny_tokenizer(64), m=64, reflection=reflection)


def test_case7_cli_reports_a_nan_model_without_traceback(tmp_path, capsys):
    nan_model("head").save_pretrained(tmp_path / "model")
    tiny_tokenizer(64).save_pretrained(tmp_path / "model")
    data = write_jsonl(tmp_path / "docs.jsonl", TEXTS[:6])
    code = main(
        [
            "sketch",
            "--dataset",
            str(data),
            "--model",
            str(tmp_path / "model"),
            "-m",
            "64",
            "--no-progress",
            "--cpu",
            "--output",
            str(tmp_path / "sig.safetensors"),
        ]
    )
    error = capsys.readouterr().err
    assert code == 1 and "Traceback" not in error
    assert re.search("error: " + NON_FINITE.format("logits"), error), error


# -- 8: clear errors (what is wrong, what to do) from the CLI, without a traceback ---------------------------
def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    error = capsys.readouterr().err
    assert "Traceback" not in error
    return code, error


def sketch_cli(tiny: Path, data: Path | str, *extra: str) -> list[str]:
    return [
        "sketch",
        "--dataset",
        str(data),
        "--model",
        str(tiny / "model"),
        "-m",
        "64",
        "--no-progress",
        "--cpu",
        "--batch-size",
        "4",
        "--output",
        str(Path(data).with_suffix(".safetensors")),
        *extra,
    ]


def test_case8_empty_data_file(tiny, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, error = run_cli(sketch_cli(tiny, empty), capsys)
    assert code == 1
    assert (
        f"error: the data file {str(empty)!r} is empty (0 bytes): nothing to sketch; pass a file with one document"
        in error
    )


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("latin1.jsonl", '{"text": "caf\xe9 cr\xe8me"}\n'.encode("latin-1") * 4),
        ("latin1.txt", "caf\xe9 cr\xe8me\n".encode("latin-1") * 4),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
def test_case8_non_utf8_data_file(tiny, tmp_path, capsys, name, content, streaming):
    path = tmp_path / name
    path.write_bytes(content)
    code, error = run_cli(sketch_cli(tiny, path, *(["--streaming"] if streaming else [])), capsys)
    assert code == 1
    assert re.search(
        rf"error: cannot read {re.escape(repr(str(path)))}: it is not UTF-8 text \('utf-8' codec can't "
        r"decode byte 0xe9 in position \d+: invalid continuation byte\); convert it to UTF-8 \(e\.g\. iconv "
        r"-f latin1 -t utf-8\)",
        error,
    ), error


def test_case8_corrupted_checkpoint_record(tiny, capsys):
    args = run_args(tiny, "corrupt")
    sketch(args)
    record = Path(args.checkpoint) / "rank0-of1.json"
    record.write_text(record.read_text()[:20])
    argv = sketch_cli(tiny, tiny / "docs.jsonl", "--checkpoint", args.checkpoint, "--resume")
    code, error = run_cli(argv, capsys)
    assert code == 1
    assert re.search(
        rf"error: {re.escape(str(record))} is not a readable checkpoint record \(.+\): the checkpoint is "
        rf"damaged; delete the folder {re.escape(args.checkpoint)} to start over",
        error,
    ), error


@pytest.mark.parametrize(
    "ref", ["../sig.safetensors", "../../x/y", "datasets/../sig.safetensors", "org/..:sig.safetensors"]
)
def test_case8_dot_dot_in_a_signature_reference(tiny, capsys, ref):
    signature = tiny / "final.safetensors"
    if not signature.exists():
        sketch(run_args(tiny, "final", checkpoint=None))
    code, error = run_cli(["compare", ref, str(signature), "--heatmap", ""], capsys)
    assert code == 1
    assert f"error: {ref}: no such file, and not a Hub reference (a Hub repo id has no '..' or '.' part" in error


def test_case8_metric_arguments(tiny):
    import evaluate

    from fisherhub.metric import metric_path

    signature = tiny / "metric.safetensors"
    sketch(run_args(tiny, "metric", checkpoint=None))
    metric = evaluate.load(metric_path(), keep_in_memory=True)
    with pytest.raises(
        InputError,
        match=r"fisher_alignment needs predictions= \(the source tasks\) and references= "
        r"\(the target tasks\), one pair per index",
    ):
        metric.compute()
    with pytest.raises(InputError, match=r"`references` is missing: pass predictions= and references= of equal length"):
        metric.compute(predictions=[str(signature)])
    with pytest.raises(
        InputError,
        match=r"2 predictions but 1 references: pair i is \(predictions\[i\], "
        r"references\[i\]\); pass one reference per prediction",
    ):
        metric.compute(predictions=[str(signature)] * 2, references=[str(signature)])
    assert metric.compute(predictions=[str(signature)], references=[str(signature)])["fisher_alignment"] == [1.0]


# -- 9: a malformed adapter_config.json or adapter card skips that candidate ----------------------------------
def test_case9_malformed_adapter_config_or_card_skips_the_candidate(tmp_path):
    from fisherhub.selection import select_adapter

    model, tokenizer = tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    metadata = {"base_model": "tester/tiny"}
    target = sketch_texts(TEXTS[:20], model, tokenizer, m=64, metadata=metadata)
    candidate = sketch_texts(TEXTS[20:], model, tokenizer, target, metadata=metadata)
    folders = {}
    for name, config, card in [
        ("good", json.dumps({"base_model_name_or_path": "tester/tiny"}), None),
        ("broken-config", '{"base_model_name_or_path": "tester/tiny"', None),
        ("list-config", "[1, 2]", None),
        (
            "broken-card",
            json.dumps({"base_model_name_or_path": "tester/tiny"}),
            "---\ndatasets: [unclosed\n---\n# card\n",
        ),
    ]:
        folder = folders[name] = tmp_path / name
        (folder / ".fisher_signatures").mkdir(parents=True)
        candidate.save(folder / ".fisher_signatures" / "training-data.safetensors")
        (folder / "adapter_config.json").write_text(config)
        if card is not None:
            (folder / "README.md").write_text(card)
    selection = select_adapter(target, list(folders.values()))
    assert [row.candidate for row in selection.ranking] == [str(folders["good"])]
    reasons = {skipped.candidate: skipped.reason for skipped in selection.skipped}
    assert set(reasons) == {str(folders[name]) for name in ("broken-config", "list-config", "broken-card")}
    assert re.fullmatch(
        r"adapter_config\.json is not valid JSON \(Expecting ',' delimiter: line 1 column \d+ \(char \d+\)\): "
        r"save the adapter again with PeftModel\.save_pretrained",
        reasons[str(folders["broken-config"])],
    )
    assert reasons[str(folders["list-config"])] == (
        "adapter_config.json is a JSON list, not an object of PEFT settings: "
        "save the adapter again with PeftModel.save_pretrained"
    )
    assert re.fullmatch(
        r"adapter card: README\.md has a malformed YAML header \(.+\): fix its YAML block between the '---' lines",
        reasons[str(folders["broken-card"])],
        re.S,
    ), reasons[str(folders["broken-card"])]


# -- 10: every odd row empty; --split on a single data file -----------------------------------------------------
def test_case10_every_odd_row_empty_is_named(tiny, tmp_path, capsys):
    """wikitext-like data: a blank line after every paragraph."""
    texts = [text if index % 2 == 0 else "" for index, text in enumerate(TEXTS[:20])]
    expected = (
        "half B got no scored tokens because every odd-indexed row is empty or shorter than 2 tokens (10 of "
        "the 20 documents given); the split-sample norm needs scored documents at even and at odd positions. "
        "Drop the empty rows first"
    )
    code, error = run_cli(sketch_cli(tiny, write_jsonl(tmp_path / "blank-lines.jsonl", texts)), capsys)
    assert code == 1 and f"error: {expected}" in error, error
    with pytest.raises(InputError, match=re.escape(expected)):
        sketch_texts(texts, *tiny_causal_lm_and_tokenizer(), m=64)
    with pytest.raises(InputError, match=re.escape(expected.replace("B", "A").replace("odd-indexed", "even-indexed"))):
        sketch_texts(texts[1:] + ["  "], *tiny_causal_lm_and_tokenizer(), m=64)


def tiny_causal_lm_and_tokenizer():
    return tiny_causal_lm("qwen2", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)


def test_case10_split_on_a_single_data_file_is_refused(tiny, capsys):
    code, error = run_cli(sketch_cli(tiny, tiny / "docs.jsonl", "--split", "test"), capsys)
    assert code == 1
    assert (
        f"error: --split 'test' names a split of a Hub dataset or a saved DatasetDict, but {str(tiny / 'docs.jsonl')!r} "
        "is a data file: it is one split ('train'). Leave --split out, or pass the file that holds that split"
    ) in error


# -- 4: bf16 and fp32 signatures of one model ----------------------------------------------------------------
def test_case4_bfloat16_like_a_float32_signature(tiny, capsys):
    """The head checksum is of the weights as stored: a model stored in float32 and loaded in bfloat16 has the
    checksum of its float32 signature, and ``--like`` reuses that signature's pilot, so the two compare."""
    from fisherhub import Signature, alignment

    fp32 = sketch(run_args(tiny, "fp32", checkpoint=None))
    argv = sketch_cli(
        tiny,
        tiny / "docs.jsonl",
        "--dtype",
        "bfloat16",
        "--like",
        str(tiny / "fp32.safetensors"),
        "--output",
        str(tiny / "bf16-like.safetensors"),
    )
    code, error = run_cli(argv, capsys)
    assert code == 0, error
    bf16 = Signature.load(tiny / "bf16-like.safetensors")
    assert bf16.sketch_id == fp32.sketch_id and bf16.num_tokens == fp32.num_tokens
    result = alignment(fp32, bf16)
    assert abs(result.fisher - 1) < 3 * result.stderr
    assert float((bf16.joint - fp32.joint).norm() / fp32.joint.norm()) < 0.05


def test_case4_independent_bfloat16_and_float32_signatures_differ_only_in_the_pilot(tiny):
    from fisherhub import alignment
    from fisherhub.core.errors import IncompatibleSignaturesError

    fp32 = sketch(run_args(tiny, "fp32-own", checkpoint=None))
    bf16 = sketch(run_args(tiny, "bf16-own", checkpoint=None, dtype="bfloat16"))
    assert bf16.spec.model_fingerprint == fp32.spec.model_fingerprint
    with pytest.raises(
        IncompatibleSignaturesError,
        match=r"differing fields: reflection: 'pilot mean \w+' vs 'pilot mean "
        r"\w+, [\d.e-]+ rad apart \(> 0.0001\): sketch one --like the other'\.",
    ):
        alignment(fp32, bf16)


def test_case4_bfloat16_model_without_files_is_refused_with_what_to_do():
    model, tokenizer = tiny_causal_lm_and_tokenizer()
    fp32 = sketch_texts(TEXTS, model, tokenizer, m=64)
    with pytest.raises(
        InputError,
        match=r"signature made with another base model .*: sketch with its base model "
        r"\(unknown\) to compare with it\. This model's head is bfloat16 and its stored weights could not "
        r"be read \(from safetensors files it was loaded from\) to compare them as stored: if it is the same "
        r"model, sketch with --dtype float32 \(dtype=torch.float32\), or load it from its files",
    ):
        sketch_texts(TEXTS, model.to(torch.bfloat16), tokenizer, fp32)
