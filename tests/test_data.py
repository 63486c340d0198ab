"""Data loading: global indices, sharding, limits, truncation, chat masks, streaming, errors."""

from __future__ import annotations

import json
import shutil

import datasets
import pytest
from fisherhub.testing.tiny_models import tiny_tokenizer

from fisherhub.core.batch import IGNORE_INDEX
from fisherhub.data.stream import DocumentStream, check_has_documents
from fisherhub.options import DataArgs
from fisherhub.core.errors import InputError

TEXTS = [f"document {i}: " + "ab " * (i % 4) for i in range(11)] + ["", ""]  # the last two have < 2 tokens (only <bos>)

CHAT_TEMPLATE = (
    "{% for message in messages %}<{{ message['role'] }}>{{ message['content'] }}<eos>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer(64)


def documents(args: DataArgs, tokenizer, rank: int = 0, world: int = 1, start: int = 0):
    return list(DocumentStream(args, tokenizer, rank, world).documents(start))


def test_global_indices_and_shards_are_disjoint_and_complete(tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    whole = documents(DataArgs(dataset), tokenizer)
    assert [d.index for d in whole] == list(range(11))  # the two short documents are dropped
    for world in (2, 3):
        shards = [documents(DataArgs(dataset), tokenizer, rank, world) for rank in range(world)]
        assert all(d.index % world == rank for rank, shard in enumerate(shards) for d in shard)
        merged = sorted((d for shard in shards for d in shard), key=lambda d: d.index)
        assert merged == whole


def test_streaming_equals_map_style_and_resume_position(tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    for rank in (0, 1):
        mapped = documents(DataArgs(dataset), tokenizer, rank, 2)
        streamed = documents(DataArgs(dataset, streaming=True), tokenizer, rank, 2)
        assert streamed == mapped
        assert documents(DataArgs(dataset, streaming=True), tokenizer, rank, 2, start=5) == [
            d for d in mapped if d.index >= 5
        ]


def test_text_tokens_truncation_and_labels(tokenizer):
    dataset = datasets.Dataset.from_dict({"text": ["hello world, hello"]})
    (document,) = documents(DataArgs(dataset, max_length=6), tokenizer)
    assert document.input_ids == tokenizer("hello world, hello")["input_ids"][:6]
    assert document.labels == document.input_ids and document.num_scored == 5


def test_limits_by_documents_and_tokens_are_global(tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    assert [d.index for d in documents(DataArgs(dataset, max_documents=4), tokenizer)] == [0, 1, 2, 3]
    whole = documents(DataArgs(dataset), tokenizer)
    limit = whole[0].num_scored + whole[1].num_scored + 1  # reached inside document 2, which is kept whole
    limited = documents(DataArgs(dataset, max_tokens=limit), tokenizer)
    assert [d.index for d in limited] == [0, 1, 2]
    shards = [documents(DataArgs(dataset, max_tokens=limit), tokenizer, rank, 2) for rank in (0, 1)]
    assert sorted(d.index for shard in shards for d in shard) == [0, 1, 2]


def test_batches_pad_right_and_record_position(tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    stream = DocumentStream(DataArgs(dataset), tokenizer, 1, 2)
    batches = list(stream.batches(batch_size=2))
    assert [b.doc_index.tolist() for b in batches] == [[1, 3], [5, 7], [9]]
    assert [b.next_index for b in batches] == [4, 8, 12]  # after the last batch: every own row (…, 11) looked at
    first = batches[0]
    lengths = first.attention_mask.sum(dim=1)
    for row, length in enumerate(lengths.tolist()):
        assert (first.labels[row, length:] == IGNORE_INDEX).all() and (first.attention_mask[row, :length] == 1).all()
    assert first.num_scored == int((lengths - 1).sum())
    assert stream.counts.seen == 6 and stream.counts.too_short == 1  # rows 1, 3, 5, 7, 9, 11 ("")


def test_chat_messages_score_only_assistant_turns(tokenizer):
    tokenizer = tiny_tokenizer(64)
    tokenizer.chat_template = CHAT_TEMPLATE
    conversation = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "and"},
        {"role": "assistant", "content": "no"},
    ]
    dataset = datasets.Dataset.from_dict({"messages": [conversation], "text": ["unused"]})
    (document,) = documents(DataArgs(dataset, messages_column="messages"), tokenizer)
    text = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert document.input_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    scored = "".join(tokenizer.decode([t]) for t in document.labels if t != IGNORE_INDEX)
    assert scored == "yes<eos>no<eos>"


def test_local_files_and_saved_datasets(tokenizer, tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"body": text}) + "\n" for text in TEXTS))
    expected = documents(DataArgs(datasets.Dataset.from_dict({"body": TEXTS}), text_column="body"), tokenizer)
    assert documents(DataArgs(str(path), text_column="body"), tokenizer) == expected
    datasets.Dataset.from_dict({"body": TEXTS}).save_to_disk(str(tmp_path / "saved"))
    assert documents(DataArgs(str(tmp_path / "saved"), text_column="body", streaming=True), tokenizer) == expected


def test_missing_column_names_the_available_ones(tokenizer):
    dataset = datasets.Dataset.from_dict({"body": ["a b c"], "title": ["t"]})
    with pytest.raises(InputError, match=r"'text' not found.*\['body', 'title'\]"):
        DocumentStream(DataArgs(dataset), tokenizer)
    with pytest.raises(InputError, match="messages column 'chat' not found"):
        DocumentStream(DataArgs(dataset, messages_column="chat"), tokenizer)


def test_empty_dataset_and_all_short_documents(tokenizer):
    with pytest.raises(InputError, match="is empty"):
        DocumentStream(DataArgs(datasets.Dataset.from_dict({"text": []})), tokenizer)
    stream = DocumentStream(DataArgs(datasets.Dataset.from_dict({"text": ["", "", ""]})), tokenizer)
    assert list(stream.batches(2)) == []
    with pytest.raises(InputError, match="all 3 documents .* shorter than 2 tokens"):
        check_has_documents(stream.counts.seen, stream.counts.too_short, stream.args)


def test_invalid_arguments():
    with pytest.raises(InputError, match="--max-length must be an int"):
        DataArgs("x", max_length=1)
    with pytest.raises(InputError, match="--max-tokens must be a positive integer"):
        DataArgs("x", max_tokens=0)


def test_a_datasets_identity_follows_its_rows_not_the_object(tmp_path):
    """``dataset_fingerprint`` (what a resume compares): equal for equal rows and for two loads of one saved
    folder, different for other rows, a selection of them, or the folder saved again with other rows."""
    from fisherhub.data.sources import dataset_fingerprint

    def identity(dataset) -> str:
        return dataset_fingerprint(dataset, DataArgs(dataset=dataset))

    rows = {"text": ["a b", "c d", "e f"]}
    first, same = datasets.Dataset.from_dict(rows), datasets.Dataset.from_dict(rows)
    assert identity(first) == identity(same)
    other = datasets.Dataset.from_dict({"text": ["a b", "c d", "e g"]})
    assert len({identity(first), identity(other), identity(first.select([0, 1]))}) == 3
    folder = tmp_path / "saved"
    first.save_to_disk(folder)
    saved = dataset_fingerprint(None, DataArgs(dataset=str(folder)))
    assert saved == dataset_fingerprint(None, DataArgs(dataset=str(folder)))
    other.save_to_disk(tmp_path / "moved")
    shutil.rmtree(folder)
    shutil.move(tmp_path / "moved", folder)
    assert dataset_fingerprint(None, DataArgs(dataset=str(folder))) != saved


def test_a_column_of_token_ids_is_read_as_tokenized():
    """A tokenized column (lists of ints, or arrays in numpy format) is scored as it is, truncated at max_length;
    anything but text or token ids is refused naming the column."""
    import numpy as np

    tokenizer = tiny_tokenizer(64)
    ids = [[5, 6, 7, 8, 9], [3, 4]]
    rows = datasets.Dataset.from_dict({"input_ids": ids})
    for form in (rows, rows.with_format("numpy")):
        stream = DocumentStream(DataArgs(form, text_column="input_ids", max_length=4), tokenizer)
        assert [(d.input_ids, d.labels) for d in stream.documents()] == [([5, 6, 7, 8], [5, 6, 7, 8]), ([3, 4], [3, 4])]
    floats = datasets.Dataset.from_dict({"values": [np.array([0.5, 1.5])]})
    with pytest.raises(InputError, match=r"column 'values' must hold strings \(or token ids\), got list"):
        list(DocumentStream(DataArgs(floats, text_column="values"), tokenizer).documents())
