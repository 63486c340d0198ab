"""Datasets in: a Hub id, a local folder, a data file or glob, or a ``datasets`` object as the ``datasets``
object to read (``load_source``), checked (split, column, emptiness) before a model loads, and its identity for
resume (``dataset_fingerprint``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from fisherhub.core.errors import InputError
from fisherhub.data.files import FILE_BUILDERS, file_builder
from fisherhub.options import DataOptions

#: the one split a local data file (or glob) is: ``datasets`` loads ``data_files={split: path}``
DATA_FILE_SPLIT = DataOptions.split


def load_source(args: DataOptions):
    """The ``datasets`` object behind ``args`` (map-style, or iterable when ``streaming``)."""
    import datasets

    source = args.dataset
    if isinstance(source, datasets.DatasetDict | datasets.IterableDatasetDict):
        source = _pick_split(source, args.split)
    elif isinstance(source, (str, os.PathLike)):
        source = _load_path_or_id(args)
    elif not isinstance(source, datasets.Dataset | datasets.IterableDataset):
        raise InputError(
            f"dataset must be a Hub id, a path, or a datasets.Dataset/IterableDataset, got {type(source).__name__}"
        )
    if args.streaming and isinstance(source, datasets.Dataset):
        source = source.to_iterable_dataset()
    if isinstance(source, datasets.Dataset) and len(source) == 0:
        raise InputError(
            f"the dataset {args.provenance()['dataset']!r} (split {args.split!r}) is empty: nothing to sketch"
        )
    _check_column(source, args)
    return source


def dataset_fingerprint(source, args: DataOptions) -> str | None:
    """What identifies the rows (a resume refuses other rows): ``datasets``' own hash (``Hasher``) of a
    map-style dataset (its table, a memory-mapped one by its files, with its indices and format); for a stream
    of files or a Hub dataset, the builder's config id (it hashes the data files with their modification
    times, or the Hub commit); None for an iterable dataset given in memory."""
    import datasets
    from datasets.fingerprint import Hasher

    if isinstance(source, datasets.Dataset):
        return Hasher.hash(source)
    if isinstance(args.dataset, datasets.Dataset):
        return Hasher.hash(args.dataset)
    if not isinstance(args.dataset, (str, os.PathLike)):
        return None
    name = os.fspath(args.dataset)
    path = Path(name)
    if _is_saved_dataset(path):
        return Hasher.hash(_load_saved_dataset(name, args.split))
    builder = file_builder(path)
    if builder is not None:
        return datasets.load_dataset_builder(builder, data_files={args.split: name}).config_id
    return datasets.load_dataset_builder(name, name=args.config, revision=args.revision).config_id


def _pick_split(dataset_dict, split: str):
    if split not in dataset_dict:
        raise InputError(f"split {split!r} not found; available splits: {sorted(dataset_dict)}")
    return dataset_dict[split]


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def _load_saved_dataset(name: str, split: str):
    """A ``save_to_disk`` folder (memory-mapped), its ``split`` when it holds a DatasetDict."""
    import datasets

    loaded = datasets.load_from_disk(name)
    return _pick_split(loaded, split) if isinstance(loaded, datasets.DatasetDict) else loaded


def _load_path_or_id(args: DataOptions):
    import datasets

    name = os.fspath(args.dataset)
    path = Path(name)
    try:
        if _is_saved_dataset(path):
            return _load_saved_dataset(name, args.split)
        builder = file_builder(path)
        if builder is not None:
            if args.split != DATA_FILE_SPLIT:
                raise InputError(
                    f"--split {args.split!r} names a split of a Hub dataset or a saved DatasetDict, but {name!r} is a "
                    f"data file: it is one split ({DATA_FILE_SPLIT!r}). Leave --split out, or pass the file that holds that split"
                )
            if path.is_file() and path.stat().st_size == 0:
                raise InputError(
                    f"the data file {name!r} is empty (0 bytes): nothing to sketch; pass a file with one document "
                    "per row (or line, for .txt)"
                )
            return datasets.load_dataset(
                builder, data_files={args.split: name}, split=args.split, streaming=args.streaming
            )
        return datasets.load_dataset(
            name, name=args.config, split=args.split, revision=args.revision, streaming=args.streaming
        )
    except datasets.exceptions.DatasetGenerationError as exc:
        raise _unreadable(name, exc.__cause__ or exc) from exc
    except (OSError, ValueError, ConnectionError) as exc:
        if isinstance(exc, UnicodeDecodeError):
            raise _unreadable(name, exc) from exc
        raise InputError(_cannot_load(name, args, exc)) from exc


def _cannot_load(name: str, args: DataOptions, exc: Exception) -> str:
    """What is wrong with ``name`` when ``datasets`` cannot load it, for the kind of input it is: a local data file
    without rows, a folder without data files, a Hub id (offline: not in the cache; online: the Hub's answer)."""
    from huggingface_hub import constants

    path = Path(name)
    suffixes = ", ".join(sorted(set(FILE_BUILDERS)))
    if path.is_dir():
        files = [
            f for f in path.rglob("*") if f.is_file() and not any(p.startswith(".") for p in f.relative_to(path).parts)
        ]
        if not any(file_builder(f) is not None and f.stat().st_size for f in files):
            return (
                f"the folder {name!r} holds no data file to sketch (none with rows among {suffixes}, or a "
                "save_to_disk folder): pass a folder of data files, or a data file"
            )
        return f"cannot load the folder {name!r} as a dataset (split {args.split!r}): {exc}"
    if path.is_file() or file_builder(path) is not None:
        if "corresponds to no data" in str(exc):
            return (
                f"the data file {name!r} holds no rows (a header only, or blank lines): nothing to sketch; pass a "
                "file with one document per row (or line, for .txt)"
            )
        return f"cannot read the data file {name!r} (split {args.split!r}): {exc}; check its format"
    where = f"config {args.config!r}, split {args.split!r}"
    if constants.HF_HUB_OFFLINE:
        return (
            f"cannot load the Hub dataset {name!r} ({where}): HF_HUB_OFFLINE is set and the datasets cache holds no "
            f"copy of it ({exc}); load it once online, or pass a local folder or data file"
        )
    return (
        f"cannot load dataset {name!r} ({where}): no such local folder or data file (from {os.getcwd()}), and the "
        f"Hub ({constants.ENDPOINT}) said: {exc}"
    )


def _unreadable(name: str, cause: BaseException) -> InputError:
    """The error for a data file ``datasets`` cannot read (a text encoding other than UTF-8, most often)."""
    if isinstance(cause, UnicodeDecodeError):
        return InputError(
            f"cannot read {name!r}: it is not UTF-8 text ({cause}); convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        )
    return InputError(
        f"cannot read {name!r}: {type(cause).__name__}: {cause}. Check the file's format and encoding (UTF-8)"
    )


def decoded(rows: Iterable, args: DataOptions) -> Iterator:
    """``rows``, with the errors of undecodable data (read lazily, row by row) as ``InputError``."""
    from datasets.exceptions import DatasetGenerationError

    try:
        yield from rows
    except (UnicodeDecodeError, DatasetGenerationError) as exc:
        cause = exc if isinstance(exc, UnicodeDecodeError) else exc.__cause__ or exc
        raise _unreadable(args.provenance()["dataset"], cause) from exc


def _check_column(source, args: DataOptions) -> None:
    columns = source.column_names
    if columns is None:  # streaming without known features: look at the first row
        first = next(decoded(source, args), None)
        if first is None:
            raise InputError(f"the dataset {args.provenance()['dataset']!r} is empty: nothing to sketch")
        columns = list(first)
    if args.column not in columns:
        kind = "messages column" if args.messages_column else "text column"
        raise InputError(
            f"{kind} {args.column!r} not found; the dataset has columns {sorted(columns)}. "
            f"Choose one with {'--messages-column' if args.messages_column else '--text-column'} "
            f"({'messages_column' if args.messages_column else 'text_column'}= in Python)."
        )
