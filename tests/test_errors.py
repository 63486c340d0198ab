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
