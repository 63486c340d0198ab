"""Signatures for the adapters nobody signed (``fisherhub index sign``): adapters of a base model that carry
no signature but whose card names public training datasets (``datasets:``) get rows in the index, sketched
by the indexer from those datasets under the base model, each dataset@revision once.

The sketched files go into the index's own dataset repo (``.fisher_signatures/sketched/``), never into the
adapters' or datasets' repos; their rows name the adapter (its commit) as the candidate and the index repo
(at the commit the files were pushed in) as where the file is. Finished datasets are kept in a work folder,
so a run that was killed resumes without sketching them again.

Under ``accelerate launch`` with N processes, dataset i (in the order the cards name them) goes to process
i mod N, which sketches it alone; the main process then gathers every outcome and alone pushes the files
and the rows, so the index gets the rows a one-process run gives.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from pathlib import Path
from typing import Any

from fisherhub.core.errors import FisherHubError
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.hub.errors import HubError, hub_errors
from fisherhub.hub.listing import LISTING_PATH
from fisherhub.hub.refs import SIGNATURE_FOLDER
from fisherhub.hub.signature_index.build import (
    InterruptedBuild,
    RepoResult,
    WorkFolder,
    default_work,
    indexed_repos,
    listed_adapters,
    work_folder,
)
from fisherhub.hub.signature_index.rows import IndexRows, read_rows
from fisherhub.hub.signature_index.schema import signature_row
from fisherhub.hub.signature_index.store import LoadedIndex, load_index, push_index
from fisherhub.hub.signature_index.update import replace_repos
from fisherhub.options import DataOptions

SKETCHED_FOLDER = f"{SIGNATURE_FOLDER}/sketched"
GENERATED_FOLDER = f"{SIGNATURE_FOLDER}/generated"
#: errors reading a third party's dataset that skip it (with the message) instead of stopping the run
DATA_ERRORS = (FisherHubError, OSError, ValueError, KeyError)


@dataclasses.dataclass(frozen=True)
class DatasetOutcome:
    """One dataset named by unsigned adapters' cards: its revision, what came of it, which adapters name it."""

    dataset: str
    revision: str | None
    status: str
    reason: str | None
    adapters: tuple[str, ...]
    file: str | None = None


@dataclasses.dataclass(frozen=True)
class SignReport:
    """What ``sign_unsigned`` did: the unsigned adapters seen, those naming datasets, each dataset's
    outcome, the rows added, and the index commit pushed (None when nothing was added)."""

    unsigned: int
    naming_datasets: int
    datasets: list[DatasetOutcome]
    rows_added: int
    commit: str | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        sketched = [d for d in self.datasets if d.status == "sketched"]
        out = [
            (
                f"{self.unsigned} unsigned adapters, {self.naming_datasets} naming datasets in their card; "
                f"{len(sketched)} of {len(self.datasets)} datasets sketched, {self.rows_added} rows added"
            )
        ]
        out += [f"  skipped {d.dataset}: {d.reason}" for d in self.datasets if d.status == "skipped"]
        return out


def _card_datasets(card: dict[str, Any] | None) -> list[str]:
    value = (card or {}).get("datasets")
    names = [value] if isinstance(value, str) else list(value or []) if isinstance(value, list) else []
    return [str(name) for name in names if isinstance(name, str) and re.fullmatch(r"[\w.-]+/[\w.-]+|[\w.-]+", name)]


def signature_file_name(dataset: str, revision: str, folder: str = SKETCHED_FOLDER) -> str:
    """Where the signature of ``dataset`` (or an adapter's generations) at ``revision`` goes in the index repo."""
    return f"{folder}/{dataset.replace('/', '--')}@{revision[:12]}.safetensors"


class SignJournal:
    """The work folder's journal of finished signatures: each process appends to its own ``KIND-RANK.jsonl``
    (one line per repo signed: name, revision, file; the file, named after the repo@revision, is saved before
    its line is written), and every journal file of ``kind`` is read back. Kinds: ``sketched`` (datasets named
    by cards), ``generated`` (adapters' own samples)."""

    def __init__(self, folder: Path, process_index: int = 0, kind: str = "sketched"):
        self.folder = work_folder(folder)
        self.path = folder / f"{kind}-{process_index}.jsonl"
        self.done: dict[tuple[str, str], str] = {}
        for journal in sorted(folder.glob(f"{kind}-*.jsonl")):
            for line in journal.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    name, revision, file = entry["name"], entry["revision"], entry["file"]
                except (json.JSONDecodeError, KeyError, TypeError):  # a line cut by a kill, or of another release
                    continue
                if (folder / file).is_file():
                    self.done[(name, revision)] = file

    def add(self, name: str, revision: str, signature: Signature) -> str:
        file = Path(signature_file_name(name, revision)).name
        signature.save(self.folder / file)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"name": name, "revision": revision, "file": file}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.done[(name, revision)] = file
        return file


def sign_unsigned(
    base_model: str,
    index: str,
    *,
    model,
    tokenizer,
    max_documents: int | None = None,
    text_column: str = "text",
    work: str | os.PathLike | None = None,
    token: str | None = None,
    stop_after: int | None = None,
    progress: bool = False,
) -> SignReport | None:
    """Sketch the datasets that unsigned adapters of ``base_model`` name in their card, under ``model`` /
    ``tokenizer`` (the base model) with the spec of the index's rows (so the rows compare), at most
    ``max_documents`` per dataset, and add one row per (adapter, sketched dataset) to the index ``index``
    (built before). ``stop_after``: stop after this process sketched that many datasets (a stand-in for a
    kill). Under N processes (``accelerate.PartialState``) each sketches its share of the datasets; the main
    process returns the report, the others None. ``progress``: a bar over this process's datasets (it honours
    ``HF_HUB_DISABLE_PROGRESS_BARS``)."""
    from accelerate import PartialState
    from accelerate.utils import gather_object
    from huggingface_hub import HfApi

    from fisherhub.pipeline.launch import warn_if_fewer_processes
    from fisherhub.pipeline.loop import sketch_dataset
    from fisherhub.pipeline.processes import no_accelerator

    options = DataOptions("", max_documents=max_documents, text_column=text_column)  # refused here, not per dataset
    loaded = load_index(index, token)
    spec = common_spec(read_rows(loaded.table, base_model, f"datasets/{loaded.ref.repo_id}", loaded.commit))
    unsigned, naming, by_dataset = _datasets_of_unsigned(base_model, token, loaded)
    state = PartialState(cpu=no_accelerator())
    warn_if_fewer_processes(state.num_processes, "index sign")
    sign_folder = Path(work or default_work(loaded.ref)) / "sign"
    api = HfApi(token=token)
    shares = list(by_dataset.items())[state.process_index :: state.num_processes]
    sketch_one = functools.partial(
        sketch_dataset, model=model, tokenizer=tokenizer, spec=spec, metadata=_signed_metadata(base_model)
    )
    journal = SignJournal(sign_folder, state.process_index)
    outcomes = _sketch_shares(shares, api, journal, options, sketch_one, stop_after, progress)
    outcomes = gather_object(outcomes)  # every process's share (waits for all of them)
    if not state.is_main_process:
        return None
    order = list(by_dataset)
    outcomes.sort(key=lambda outcome: order.index(outcome.dataset))
    sketched = [o for o in outcomes if o.status == "sketched"]
    if not sketched:
        return SignReport(len(unsigned), len(naming), outcomes, 0, None)
    rows, commit = _publish(loaded, api, SignJournal(sign_folder), sketched, naming, token)
    return SignReport(len(unsigned), len(naming), outcomes, rows, commit)


def _signed_metadata(base_model: str) -> dict[str, str]:
    return {"base_model": base_model, "signed_by": "fisherhub index sign"}


def common_spec(rows: IndexRows) -> SketchSpec | None:
    """The spec of the most common sketch id among the index's rows (None without rows)."""
    if not len(rows):
        return None
    counts: dict[str, int] = {}
    for row in rows.rows:
        counts[row["sketch_id"]] = counts.get(row["sketch_id"], 0) + 1
    common = max(counts, key=counts.__getitem__)
    return next(s for s, row in zip(rows.specs, rows.rows) if row["sketch_id"] == common)


def unsigned_adapters(base_model: str, token: str | None, loaded: LoadedIndex) -> list:
    """The adapters of ``base_model`` the Hub lists that carry no signature (no file under
    ``.fisher_signatures/``, no listing); a private one only when the index ``loaded`` holds it already
    (``listed_adapters``)."""
    listed = listed_adapters(base_model, token, private=indexed_repos(loaded))
    return [s for s in listed if not s.signature_files and LISTING_PATH not in s.files]


def _datasets_of_unsigned(base_model: str, token: str | None, loaded: LoadedIndex):
    """(the listed adapters of ``base_model`` with no signature, those whose card names datasets: id ->
    (snapshot, datasets), each named dataset -> the adapters that name it)."""
    unsigned = unsigned_adapters(base_model, token, loaded)
    naming = {s.ref.repo_id: (s, _card_datasets(s.card_data)) for s in unsigned if _card_datasets(s.card_data)}
    by_dataset: dict[str, list[str]] = {}
    for repo_id, (_, names) in naming.items():
        for name in names:
            by_dataset.setdefault(name, []).append(repo_id)
    return unsigned, naming, by_dataset


def _sketch_shares(
    shares, api, journal: SignJournal, options: DataOptions, sketch_one, stop_after: int | None, progress: bool
):
    """One ``DatasetOutcome`` per (dataset, adapters naming it) of this process's share: each dataset pinned to
    its commit and sketched (``sketch_one``) unless the journal has it; a dataset that cannot be read is
    skipped with the reason. ``stop_after``: stop after sketching that many (a stand-in for a kill)."""
    from huggingface_hub.utils import tqdm

    outcomes, sketched_now = [], 0
    for dataset, adapters in tqdm(shares, desc="sketching card datasets", unit="dataset", disable=not progress):
        try:
            with hub_errors(f"datasets/{dataset}"):
                revision = api.dataset_info(dataset).sha
        except HubError as exc:
            outcomes.append(DatasetOutcome(dataset, None, "skipped", str(exc), tuple(adapters)))
            continue
        if revision is None:
            outcomes.append(DatasetOutcome(dataset, None, "skipped", "the Hub names no commit of it", tuple(adapters)))
            continue
        if (dataset, revision) not in journal.done:
            if stop_after is not None and sketched_now >= stop_after:
                raise InterruptedBuild(f"stopped after sketching {stop_after} datasets; run again to resume")
            try:
                signature = sketch_one(dataset, data=dataclasses.replace(options, dataset=dataset, revision=revision))
            except DATA_ERRORS as exc:
                outcomes.append(
                    DatasetOutcome(dataset, revision, "skipped", f"{type(exc).__name__}: {exc}", tuple(adapters))
                )
                continue
            journal.add(dataset, revision, signature)
            sketched_now += 1
        outcomes.append(
            DatasetOutcome(dataset, revision, "sketched", None, tuple(adapters), signature_file_name(dataset, revision))
        )
    return outcomes


def _publish(loaded: LoadedIndex, api, journal: SignJournal, sketched, naming, token: str | None):
    """The sketched files committed to the index repo, then one row per (adapter, sketched dataset) added to
    the index; (rows added, the index's new commit)."""
    files = {o.file: journal.folder / journal.done[(o.dataset, o.revision)] for o in sketched}
    rows = [(naming[adapter][0], o.file, "sketched") for o in sketched for adapter in o.adapters]
    return publish_rows(loaded, api, journal.folder, files, rows, "signatures sketched by the indexer", token)


def publish_rows(loaded: LoadedIndex, api, work: Path, files: dict[str, Path], rows, message: str, token: str | None):
    """``files`` (path in the index repo -> local file) committed to the index repo in one commit, then one row
    per (adapter snapshot, path, how obtained) of ``rows`` added to the index, replacing the adapters' rows;
    (rows added, the index's new commit). The rows pushed are kept in ``work``."""
    from huggingface_hub import CommitOperationAdd

    with hub_errors(f"datasets/{loaded.ref.repo_id}"):
        info = api.create_commit(
            loaded.ref.repo_id,
            repo_type="dataset",
            commit_message=message,
            operations=[CommitOperationAdd(path, local) for path, local in files.items()],
        )
    results: dict[str, list[dict[str, Any]]] = {}
    snapshots = {}
    for snapshot, path, obtained in rows:
        signature = Signature.load(files[path])
        row = signature_row(signature, snapshot.ref.with_path(path), obtained, loaded.layout, snapshot.card_data)
        snapshots[snapshot.ref.repo_id] = snapshot
        results.setdefault(snapshot.ref.repo_id, []).append(
            {**row, "file_repo": loaded.ref.repo_id, "file_commit": info.oid}
        )
    folder = WorkFolder(work / f"push-{info.oid[:12]}", loaded.base_model, loaded.layout)
    keys = {("model", adapter) for adapter in results}
    folder.add(
        [
            RepoResult(adapter, "model", str(snapshots[adapter].ref.revision), adapter_rows, [])
            for adapter, adapter_rows in results.items()
        ]
    )
    table, replacement = replace_repos(loaded, folder, keys)
    commit, _ = push_index(
        table, loaded.ref, loaded.base_model, loaded.layout, folder.entries(), token=token, replacement=replacement
    )
    return sum(map(len, results.values())), commit
