"""FisherSignatureCallback on a short PEFT LoRA run with transformers' Trainer: the signature is the base
model's (sketched before the adapter changes anything), in output_dir and every checkpoint, and pushed in
the same commit as the adapter to the local Hub server, where fisherhub lists, loads and discovers it."""

from __future__ import annotations

import pytest
import torch
from huggingface_hub import HfApi, RepoCard
from fisherhub.testing.tiny_models import tiny_causal_lm, tiny_tokenizer

from fisherhub.hub import INDEX_PATH, find_adapters, list_signatures, load_signature
from fisherhub.hub.cards import CARD_KEY
from fisherhub.hub.index import parse_index
from fisherhub.selection import select_adapter
from fisherhub.pipeline.loop import sketch_texts
from fisherhub.training_callback import FisherSignatureCallback

BASE = "tester/tiny-base"
REPO = "tester/lora-signed"
M = 256
TEXTS = [f"the {word} sat on the mat number {i}. " * 3 for i, word in enumerate(["cat", "dog", "owl", "fox"] * 10)]


def training_dataset(tokenizer):
    import datasets

    encoded = tokenizer(TEXTS, truncation=True, max_length=64, padding="max_length")
    labels = [[t if m else -100 for t, m in zip(ids, mask)] for ids, mask in zip(encoded["input_ids"], encoded["attention_mask"])]
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
        output_dir=str(output_dir), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-2, save_steps=2,
        save_strategy="steps", logging_steps=100, report_to=[], use_cpu=True, push_to_hub=True, hub_model_id=REPO,
        hub_strategy="end", disable_tqdm=True, bf16=True,  # training under autocast; the sketch is not
    )
    trainer = Trainer(model=model, args=args, train_dataset=training_dataset(tokenizer), processing_class=tokenizer,
                      callbacks=[callback])
    trainer.train()

    signature = callback.signature
    assert torch.equal(signature.joint, expected.joint) and signature.sketch_id == expected.sketch_id  # the base model's
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
    assert CARD_KEY not in RepoCard.load(api.hf_hub_download(REPO, "README.md")).data  # the Trainer's own card
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
    expected = sketch_dataset(rows, model, tokenizer, data=DataArgs(rows, text_column="body", max_documents=30), m=M,
                              metadata={"base_model": BASE})
    assert torch.equal(callback.signature.joint, expected.joint) and callback.signature.num_documents == 30
    [info] = list_signatures(tmp_path / "out")
    assert (info.sketch_id, info.base_model, info.listed) == (expected.sketch_id, BASE, True)
