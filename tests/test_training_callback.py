"""FisherSignatureCallback on a short PEFT LoRA run with transformers' Trainer: the signature is the base
model's (sketched before the adapter changes anything), in output_dir and every checkpoint, and pushed in
the same commit as the adapter to the local Hub server, where fisherhub lists, loads and discovers it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from huggingface_hub import HfApi, RepoCard
from transformers import TrainingArguments

from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub.hub import INDEX_PATH, find_adapters, list_signatures, load_signature, push_signature
from fisherhub.hub.cards import CARD_KEY, SIGNATURE_TAG
from fisherhub.hub.listing import parse_index
from fisherhub.selection import select_adapter
from fisherhub.options import DataOptions
from fisherhub.pipeline.loop import sketch_dataset, sketch_texts
from fisherhub.training_callback import FisherSignatureCallback

BASE = "tester/tiny-base"
REPO = "tester/lora-signed"
M = 256
TEXTS = [f"the {word} sat on the mat number {i}. " * 3 for i, word in enumerate(["cat", "dog", "owl", "fox"] * 10)]


def training_dataset(tokenizer):
    import datasets

    encoded = tokenizer(TEXTS, truncation=True, max_length=64, padding="max_length")
    labels = [
        [t if m else -100 for t, m in zip(ids, mask)]
        for ids, mask in zip(encoded["input_ids"], encoded["attention_mask"])
    ]
    return datasets.Dataset.from_dict({**encoded, "labels": labels})


def test_callback_signs_a_lora_run_and_the_push(hub, hf_hub_cache, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, TrainingArguments

    tokenizer = tiny_tokenizer(64)
    base = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    base.config._name_or_path = BASE  # what a model loaded by id records
    expected = sketch_texts(TEXTS, base, tokenizer, m=M, metadata={"base_model": BASE, "dataset": "tester/pets"})
    torch.manual_seed(0)
    # init_lora_weights=False: the adapter changes the outputs from step 0, so sketching with it would differ
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(base, config)
    with torch.no_grad():
        batch = tokenizer(TEXTS[:2], return_tensors="pt", padding=True)
        with model.disable_adapter():
            plain = model(**batch).logits
        assert not torch.allclose(model(**batch).logits, plain)
    adapted = sketch_texts(TEXTS, model, tokenizer, m=M, metadata={"base_model": BASE})

    callback = FisherSignatureCallback(TEXTS, dataset_name="tester/pets", m=M, progress=False)
    output_dir = tmp_path / "run"
    args = TrainingArguments(
        output_dir=str(output_dir),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        save_steps=2,
        save_strategy="steps",
        logging_steps=100,
        report_to=[],
        use_cpu=True,
        push_to_hub=True,
        hub_model_id=REPO,
        hub_strategy="end",
        disable_tqdm=True,
        bf16=True,  # training under autocast; the sketch is not
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=training_dataset(tokenizer),
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trainer.train()

    signature = callback.signature
    assert (
        torch.equal(signature.joint, expected.joint) and signature.sketch_id == expected.sketch_id
    )  # the base model's
    assert not torch.allclose(signature.joint, adapted.joint)
    assert signature.metadata["base_model"] == BASE and signature.metadata["dataset"] == "tester/pets"
    for folder in (output_dir, output_dir / "checkpoint-2", output_dir / "checkpoint-4"):
        [entry] = parse_index((folder / INDEX_PATH).read_bytes(), str(folder))
        assert (folder / entry["path"]).read_bytes() == signature.to_bytes()
        assert RepoCard.load(folder / "README.md").data[CARD_KEY] == [entry]
    assert (output_dir / "checkpoint-4" / "adapter_model.safetensors").is_file()

    trainer.push_to_hub()  # uploads output_dir: the adapter and the signature in one commit
    api = HfApi()
    [commit] = [c for c in api.list_repo_commits(REPO) if c.title.startswith("End of training")]
    files = set(api.list_repo_files(REPO, revision=commit.commit_id))
    assert {"adapter_model.safetensors", "adapter_config.json", INDEX_PATH, entry["path"]} <= files
    card = RepoCard.load(api.hf_hub_download(REPO, "README.md"))  # the Trainer's own card, signed again after
    assert "Training procedure" in card.text or "More Information Needed" in card.text  # (written by the Trainer)
    assert "This adapter carries" in card.text and card.data[CARD_KEY] == [entry]
    assert SIGNATURE_TAG in card.data.tags and card.data.datasets == ["tester/pets"] and card.data.base_model == BASE
    assert [a.ref.repo_id for a in find_adapters(BASE, untagged=False)] == [REPO]  # found by the tag alone
    [info] = list_signatures(REPO)
    assert (info.path, info.listed, info.sketch_id) == (entry["path"], True, signature.sketch_id)
    assert load_signature(REPO).to_bytes() == signature.to_bytes()
    assert [a.ref.repo_id for a in find_adapters(BASE)] == [REPO]  # discoverable although the card lost the tag
    selection = select_adapter(expected, base_model=BASE)
    assert selection.best.candidate == REPO and selection.best.adapter.revision == commit.commit_id


def test_callback_refuses_bad_data():
    from fisherhub import InputError

    with pytest.raises(InputError, match="list of texts"):
        FisherSignatureCallback([1, 2, 3])
    with pytest.raises(InputError, match="list of texts"):
        FisherSignatureCallback([])


def test_callback_sketches_a_dataset_column_into_output_dir(tmp_path):
    import datasets
    from transformers import TrainerState

    from fisherhub.options import DataArgs
    from fisherhub.pipeline.loop import sketch_dataset

    tokenizer = tiny_tokenizer(64)
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    rows = datasets.Dataset.from_dict({"body": TEXTS, "id": list(range(len(TEXTS)))})
    callback = FisherSignatureCallback(rows, text_column="body", max_documents=30, base_model=BASE, m=M, progress=False)
    args = type("Args", (), {"output_dir": str(tmp_path / "out")})()
    model.train()
    callback.on_train_begin(args, TrainerState(), None, model=model, processing_class=tokenizer)
    assert model.training  # restored
    model.eval()
    expected = sketch_dataset(
        rows,
        model,
        tokenizer,
        data=DataArgs(rows, text_column="body", max_documents=30),
        m=M,
        metadata={"base_model": BASE},
    )
    assert torch.equal(callback.signature.joint, expected.joint) and callback.signature.num_documents == 30
    [info] = list_signatures(tmp_path / "out")
    assert (info.sketch_id, info.base_model, info.listed) == (expected.sketch_id, BASE, True)


def test_the_sketch_runs_the_models_own_forward_and_gives_back_the_mixed_precision_one():
    """A model whose forward is wrapped in bf16 autocast as ``Accelerator.prepare`` wraps it (accelerate's
    public ``convert_outputs_to_fp32`` over ``torch.autocast``) is run without it inside ``_as_base_model``,
    with it again afterwards."""
    from types import MethodType

    from accelerate.utils import convert_outputs_to_fp32

    from fisherhub.training_callback import _as_base_model

    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64).train()
    batch = tiny_tokenizer(64)(TEXTS[:2], return_tensors="pt", padding=True)
    with torch.no_grad():
        plain = model(**batch).logits
        autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        model.forward = MethodType(convert_outputs_to_fp32(autocast(type(model).forward)), model)
        wrapped = model.forward
        mixed = model(**batch).logits
        assert not torch.equal(mixed, plain)
        with _as_base_model(model) as base:
            assert not base.training
            assert torch.equal(base(**batch).logits, plain)
        assert model.forward == wrapped and model.training
        assert torch.equal(model(**batch).logits, mixed)


def _trainer(tmp_path, callback, **overrides):
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, TrainingArguments

    tokenizer = tiny_tokenizer(64)
    base = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    base.config._name_or_path = BASE
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"]))
    settings = {
        "output_dir": str(tmp_path / "run"),
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "save_steps": 1,
        "save_strategy": "steps",
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
    }
    args_type = overrides.pop("args_type", TrainingArguments)
    args = args_type(**{**settings, **overrides})
    return (
        Trainer(
            model=model,
            args=args,
            train_dataset=training_dataset(tokenizer),
            processing_class=tokenizer,
            callbacks=[callback],
        ),
        tokenizer,
        base,
    )


def test_a_signing_failure_never_ends_training(tmp_path, monkeypatch, caplog):
    import fisherhub.training_callback as module

    failing = FisherSignatureCallback("no-such-org/no-such-dataset", base_model=BASE, m=M, progress=False)
    trainer, _, _ = _trainer(tmp_path / "a", failing)
    trainer.train()
    assert trainer.state.global_step == 2 and failing.signature is None
    assert "cannot sign the training data" in failing.failure and "training goes on" in caplog.text

    writes = []

    def push_then_fail(signature, folder, **kwargs):
        writes.append(folder)
        if len(writes) > 1:
            raise OSError(28, "No space left on device")
        return push_signature(signature, folder, **kwargs)

    monkeypatch.setattr(module, "push_signature", push_then_fail)
    saving = FisherSignatureCallback(TEXTS, base_model=BASE, m=M, progress=False)
    trainer, _, _ = _trainer(tmp_path / "b", saving)
    trainer.train()
    assert trainer.state.global_step == 2 and saving.signature is not None
    assert "No space left on device" in saving.failure and len(writes) >= 5  # train begin, then every save went on


@dataclasses.dataclass
class ArgsWithMaxLength(TrainingArguments):
    """What TRL's ``SFTConfig`` adds to the arguments (TRL is not installed here)."""

    max_length: int | None = 1024


def test_documents_are_truncated_at_the_trainers_max_length(tmp_path):
    follows = FisherSignatureCallback(TEXTS, base_model=BASE, m=M, progress=False)
    trainer, tokenizer, base = _trainer(
        tmp_path / "a", follows, args_type=ArgsWithMaxLength, max_length=16, max_steps=1
    )
    trainer.train()
    assert follows.signature.metadata["max_length"] == "16"
    expected = sketch_texts(TEXTS, base, tokenizer, m=M, max_length=16, metadata={"base_model": BASE})
    assert follows.signature.num_tokens == expected.num_tokens < sketch_texts(TEXTS, base, tokenizer, m=M).num_tokens

    from fisherhub import InputError

    refuses = FisherSignatureCallback(TEXTS, base_model=BASE, m=M, max_length=512, progress=False)
    trainer, _, _ = _trainer(tmp_path / "b", refuses, args_type=ArgsWithMaxLength, max_length=16, max_steps=1)
    with pytest.raises(InputError, match=r"max_length=512\) but the trainer truncates at max_length=16"):
        trainer.train()


def test_every_save_pushes_an_adapter_card_with_its_datasets(hub, hf_hub_cache, tmp_path):
    callback = FisherSignatureCallback(TEXTS, dataset_name="tester/pets", m=M, progress=False)
    trainer, _, _ = _trainer(
        tmp_path, callback, push_to_hub=True, hub_model_id="tester/every-save", hub_strategy="every_save"
    )
    trainer.train()
    trainer._finish_current_push()
    api = HfApi()
    first = [c for c in api.list_repo_commits("tester/every-save") if c.title.startswith("Training in progress")][-1]
    card = RepoCard.load(api.hf_hub_download("tester/every-save", "README.md", revision=first.commit_id))
    assert "This adapter carries" in card.text and "This dataset carries" not in card.text
    assert card.data.datasets == ["tester/pets"] and SIGNATURE_TAG in card.data.tags
    assert card.data.base_model == BASE and card.data.library_name == "peft"


def test_a_dataset_without_the_text_column_is_refused_when_the_callback_is_made():
    """Issue 32: a dataset whose texts are in ``content`` signed nothing at train begin; now the callback is not
    made: the error names the columns found and the argument that picks one."""
    import datasets

    from fisherhub import InputError

    rows = datasets.Dataset.from_dict({"content": TEXTS, "id": list(range(len(TEXTS)))})
    with pytest.raises(
        InputError, match=r"no column 'text'; its columns are \['content', 'id'\]\. Pass text_column='content'"
    ):
        FisherSignatureCallback(rows, base_model=BASE)
    with pytest.raises(InputError, match=r"no column 'body'; its columns are \['content', 'id'\]"):
        FisherSignatureCallback(rows, text_column="body", base_model=BASE)
    tokenized = datasets.Dataset.from_dict({"content": TEXTS, "input_ids": [[1, 2]] * len(TEXTS)})
    with pytest.raises(InputError, match="no column 'body'"):  # a named column is never replaced by the token ids
        FisherSignatureCallback(tokenized, text_column="body", base_model=BASE)


def test_text_column_picks_the_column_of_texts(tmp_path):
    import datasets
    from transformers import TrainerState

    tokenizer = tiny_tokenizer(64)
    model = tiny_causal_lm("llama", tie_word_embeddings=False, vocab_size=64)
    rows = datasets.Dataset.from_dict({"content": TEXTS, "id": list(range(len(TEXTS)))})
    callback = FisherSignatureCallback(rows, text_column="content", base_model=BASE, m=M, progress=False)
    args = type("Args", (), {"output_dir": str(tmp_path / "out")})()
    callback.on_train_begin(args, TrainerState(), None, model=model, processing_class=tokenizer)
    expected = sketch_texts(TEXTS, model.eval(), tokenizer, m=M, metadata={"base_model": BASE})
    assert callback.failure is None and torch.equal(callback.signature.joint, expected.joint)
    assert callback.signature.metadata["text_column"] == "content"


def test_a_tokenized_dataset_is_sketched_from_its_input_ids_without_the_padding(tmp_path):
    """What a Trainer trains on (input_ids, attention_mask, labels; no text): the token ids are sketched, the
    padding dropped, so the signature is the texts' own."""
    import datasets

    tokenizer = tiny_tokenizer(64)
    encoded = tokenizer(TEXTS, truncation=True, max_length=128, padding="max_length")
    assert any(0 in mask for mask in encoded["attention_mask"])  # some rows are padded
    tokenized = datasets.Dataset.from_dict({**encoded, "labels": encoded["input_ids"]})
    callback = FisherSignatureCallback(tokenized, base_model=BASE, m=M, progress=False)
    trainer, tokenizer, base = _trainer(tmp_path, callback, max_steps=1)
    expected = sketch_texts(TEXTS, base, tokenizer, m=M, max_length=128, metadata={"base_model": BASE})
    padded = sketch_dataset(tokenized, base, tokenizer, data=DataOptions(tokenized, text_column="input_ids"), m=M)
    trainer.train()  # (the base model carries the adapter it trains, in place: sketched before)
    assert callback.failure is None and callback.signature.metadata["text_column"] == "input_ids"
    assert torch.equal(callback.signature.joint, expected.joint)
    assert callback.signature.num_tokens == expected.num_tokens < padded.num_tokens
    [info] = list_signatures(tmp_path / "run")
    assert info.sketch_id == expected.sketch_id
    # in torch format (tensors), and as a stream
    from transformers import TrainerState

    for form in (tokenized.with_format("torch"), tokenized.to_iterable_dataset()):
        again = FisherSignatureCallback(form, base_model=BASE, m=M, progress=False)
        args = type("Args", (), {"output_dir": str(tmp_path / "again")})()
        again.on_train_begin(args, TrainerState(), None, model=base, processing_class=tokenizer)
        assert again.failure is None and again.signature.num_tokens == expected.num_tokens, type(form).__name__


def test_a_data_file_without_the_text_column_logs_why_and_training_goes_on(tmp_path, caplog):
    """A Hub id or data file shows its columns when it loads, at train begin: the failure names them and
    text_column=, and the run trains to the end."""
    import json

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"content": text}) + "\n" for text in TEXTS))
    callback = FisherSignatureCallback(str(data), base_model=BASE, m=M, progress=False)
    trainer, _, _ = _trainer(tmp_path, callback)
    trainer.train()
    assert trainer.state.global_step == 2 and callback.signature is None
    assert "the dataset has columns ['content']" in callback.failure and "text_column=" in callback.failure
    assert "training goes on" in caplog.text
