"""The library's errors are their own family: a generic ``except ValueError`` (the library's own handlers
around datasets and safetensors, or a user's) never swallows or re-wraps them."""

import datasets
import pytest

import fisherhub
from fisherhub.core.errors import FisherHubError, InputError, SignatureFileError
from fisherhub.data.sources import load_source
from fisherhub.options import DataArgs


def test_library_errors_are_not_value_errors():
    for error in (FisherHubError, InputError, SignatureFileError, fisherhub.IncompatibleSignaturesError):
        assert not issubclass(error, ValueError), error
    with pytest.raises(InputError):
        try:
            DataArgs("x.jsonl", max_length=1)
        except ValueError:  # a caller's handler for its own ValueErrors
            pytest.fail("a generic ValueError handler caught the library's error")


def test_an_unknown_split_of_a_saved_dataset_keeps_its_own_message(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a b c"]})}).save_to_disk(tmp_path / "saved")
    with pytest.raises(InputError, match=r"^split 'test' not found; available splits: \['train'\]$"):
        load_source(DataArgs(str(tmp_path / "saved"), split="test"))


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (
            lambda folder: (folder / "header-only.csv").write_text("text\n"),
            r"the data file '.*header-only\.csv' holds no rows",
        ),
        (lambda folder: (folder / "blank.jsonl").write_text("\n\n"), r"the data file '.*blank\.jsonl' holds no rows"),
        (lambda folder: (folder / "empty").mkdir(), r"the folder '.*empty' holds no data file to sketch"),
        (
            lambda folder: (folder / "notes").mkdir() or (folder / "notes" / "README").write_text("no data here"),
            r"the folder '.*notes' holds no data file to sketch",
        ),
    ],
)
def test_an_empty_local_input_says_what_is_wrong_with_it(tmp_path, make, said):
    """Issue 32: an empty CSV or folder ended with "Pass a local folder/file, or a Hub id available offline", for a
    local input, online. It says what is wrong with the input, and nothing about the Hub."""
    make(tmp_path)
    [name] = list(tmp_path.iterdir())
    with pytest.raises(InputError, match=said) as exc:
        load_source(DataArgs(str(name)))
    assert "Hub" not in str(exc.value) and "offline" not in str(exc.value)


def test_a_missing_hub_dataset_is_said_as_the_hub_answers_it(hub):
    with pytest.raises(
        InputError, match=r"cannot load dataset 'org/no-such-data' .*: no such local folder or data file"
    ) as exc:
        load_source(DataArgs("org/no-such-data"))
    assert hub.endpoint in str(exc.value) and "available offline" not in str(exc.value)


def test_two_base_models_are_told_to_sketch_under_one_model_not_like_the_other():
    """Issue 32: ``compare`` of signatures of two base models suggested sketching ``like=`` the other, which is then
    refused (another model's head). The hint says to sketch both under one model; other spec differences keep
    ``--like``."""
    from fisherhub import SketchSpec, SketchState, alignment
    from fisherhub.core.batch import HeadBatch
    from fisherhub.testing.oracles import synthetic_task
    import torch

    def signature(head: str, m: int = 64):
        spec = SketchSpec(d=8, vocab_size=16, m=m).with_fingerprint(head_checksum=head)
        activations, errors = synthetic_task(60, 8, 16, seed=0)
        batch = HeadBatch(activations=activations, doc_index=torch.arange(60), errors=errors)
        return SketchState(spec).update(batch).finalize({"base_model": f"org/{head}"})

    with pytest.raises(fisherhub.IncompatibleSignaturesError) as exc:
        alignment(signature("llama"), signature("qwen"))
    message = str(exc.value)
    assert "sketched under different base models ('org/llama' and 'org/qwen')" in message
    assert "sketch both datasets under the same model" in message and "like=` the other" not in message
    with pytest.raises(
        fisherhub.IncompatibleSignaturesError,
        match=r"m: 64 vs 128\. Sketch one again with the other's spec: `fisherhub sketch --like",
    ):
        alignment(signature("llama"), signature("llama", m=128))
