"""Building and updating an index: every adapter of a base model the Hub lists, read ``workers`` repos at once,
each repo's signatures made rows; a work folder journals what was read, so a build that was killed resumes.
Building never writes to the repos it reads."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast


from fisherhub.core.errors import FisherHubError, InputError
from fisherhub.safe_text import printable
from fisherhub.hub.errors import HubUnavailableError, hub_errors
from fisherhub.hub.discovery import LISTING_FIELDS, adapter_tag, described
from fisherhub.hub.retry import with_retries
from fisherhub.hub.pool import DEFAULT_WORKERS, bounded_completed
from fisherhub.hub.refs import SignatureRef, index_ref
from fisherhub.hub.signature_index.layout import Layout
from fisherhub.hub.snapshot import RepoSnapshot
from fisherhub.options import canonical_model_id
from fisherhub.hub.signature_index.card import IndexSummary
from fisherhub.hub.signature_index.schema import DATA_DIR, INDEX_FORMAT, STATE_PATH, conform, row_schema, signature_row
from fisherhub.hub.signature_index.store import LoadedIndex, push_index

if TYPE_CHECKING:
    from huggingface_hub.hf_api import DatasetInfo, ExpandModelProperty_T

logger = logging.getLogger(__name__)


#: rows written to one resume chunk of the work folder
CHUNK_ROWS = 256


@dataclasses.dataclass(frozen=True)
class RepoResult:
    """What reading one repo gave: its rows, and the signatures it could not give (path, reason); ``retry``:
    some of them because the Hub was unavailable (429 or 5xx after retries), so a resume or an update reads the
    repo again."""

    repo_id: str
    repo_type: str
    commit: str
    rows: list[dict[str, Any]]
    problems: list[tuple[str, str]]
    retry: bool = False


def repo_rows(
    snapshot: RepoSnapshot, base_model: str, layout: Layout, token: str | None = None, once: bool = False
) -> RepoResult:
    """The rows of the signatures ``snapshot`` (a repo at one commit) publishes for ``base_model``, each
    file downloaded at that commit and loaded as ``load_signature`` loads it; the rest with their reason.
    ``once``: the Hub could not serve the repo at this commit before: each file is tried once, without the
    client's backoff on a 5xx (``load_hub_signature``)."""
    from fisherhub.hub.read import load_hub_signature, snapshot_signatures

    ref = snapshot.ref
    rows, problems, retry = [], [], False
    for info in snapshot_signatures(snapshot, token, read_headers=False):
        if info.base_model is not None and canonical_model_id(info.base_model) != canonical_model_id(base_model):
            continue  # a signature under another base model belongs to that model's index
        if info.problem is not None:
            problems.append((info.path, info.problem))
            continue
        try:
            signature = load_hub_signature(ref.with_path(info.path), token, once=once)
        except FisherHubError as exc:
            problems.append((info.path, str(exc)))
            retry |= isinstance(exc, HubUnavailableError)
            continue
        if canonical_model_id(signature.metadata.get("base_model")) != canonical_model_id(base_model):
            problems.append((info.path, f"the file names base model {signature.metadata.get('base_model')!r}"))
            continue
        rows.append(signature_row(signature, ref.with_path(info.path), "published", layout, snapshot.card_data))
    return RepoResult(ref.repo_id, ref.repo_type, str(ref.revision), rows, problems, retry)


def work_folder(folder: str | os.PathLike) -> Path:
    """``folder``, made when missing (with its parents); ``InputError`` saying what is in the way when it, or a
    folder above it, is a file (which is left as it is), or when it cannot be made."""
    path = Path(folder)
    in_the_way = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if in_the_way is not None:
        raise InputError(
            f"the work folder {path} cannot be made: {in_the_way} is a file, not a folder (it is left as it is); "
            "pass --work (work=) a folder, or a path that does not exist yet"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"the work folder {path} cannot be made ({exc.strerror or exc}): pass another --work") from exc
    return path


class WorkFolder:
    """``journal.jsonl`` (one line per repo read: id, type, commit, rows, problems, chunk, and ``retry`` for a
    repo the Hub could not serve, which a resume reads again) and
    ``chunks/NNNNN.parquet`` (the rows of the repos journaled with that chunk). A chunk is written (to a
    temporary name, then renamed) before its repos are journaled, so a kill loses at most the repos not yet
    journaled; a torn last journal line is ignored."""

    def __init__(self, folder: str | os.PathLike, base_model: str, layout: Layout):
        self.folder = work_folder(folder)
        work_folder(self.folder / "chunks")
        self.journal = self.folder / "journal.jsonl"
        settings = {"base_model": base_model, "layout": layout.as_dict(), "format": INDEX_FORMAT}
        settings_file = self.folder / "settings.json"
        if settings_file.is_file():
            recorded = json.loads(settings_file.read_text())
            if recorded != settings:
                raise InputError(
                    f"{self.folder} holds a build with {recorded}, not {settings}: pass another work folder "
                    "or delete it"
                )
        else:
            settings_file.write_text(json.dumps(settings, sort_keys=True))
        self.done: dict[tuple[str, str], dict[str, Any]] = {}
        if self.journal.is_file():
            for line in self.journal.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the line a kill tore
                self.done[(entry["repo_type"], entry["repo_id"])] = entry
        self.next_chunk = (
            max((entry["chunk"] for entry in self.done.values() if entry["chunk"] is not None), default=-1) + 1
        )

    def is_done(self, snapshot: RepoSnapshot) -> bool:
        entry = self.done.get((snapshot.ref.repo_type, snapshot.ref.repo_id))
        return entry is not None and entry["commit"] == snapshot.ref.revision and not entry.get("retry")

    def unavailable(self, snapshot: RepoSnapshot) -> bool:
        """Whether the Hub could not serve the repo at the commit ``snapshot`` names when it was journaled."""
        entry = self.done.get((snapshot.ref.repo_type, snapshot.ref.repo_id))
        return entry is not None and entry["commit"] == snapshot.ref.revision and bool(entry.get("retry"))

    def add(self, results: list[RepoResult]) -> None:
        """Journal ``results`` (their rows in one new chunk)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [row for result in results for row in result.rows]
        chunk = None
        if rows:
            chunk = self.next_chunk
            path = self.folder / "chunks" / f"{chunk:05d}.parquet"
            pq.write_table(pa.Table.from_pylist(rows, schema=row_schema()), f"{path}.tmp")
            os.replace(f"{path}.tmp", path)
            self.next_chunk += 1
        lines = []
        for result in results:
            entry = {
                "repo_id": result.repo_id,
                "repo_type": result.repo_type,
                "commit": result.commit,
                "rows": len(result.rows),
                "problems": result.problems,
                "chunk": chunk if result.rows else None,
                **({"retry": True} if result.retry else {}),
            }
            self.done[(result.repo_type, result.repo_id)] = entry
            lines.append(json.dumps(entry) + "\n")
        with open(self.journal, "a", encoding="utf-8") as handle:
            handle.write("".join(lines))
            handle.flush()
            os.fsync(handle.fileno())

    def entries(self) -> list[dict[str, Any]]:
        """The journal's repo entries (without chunk numbers), sorted."""
        keys = ("repo_id", "repo_type", "commit", "rows", "problems", "retry")
        return sorted(
            ({key: entry[key] for key in keys if key in entry} for entry in self.done.values()),
            key=lambda entry: (entry["repo_type"], entry["repo_id"]),
        )

    def table(self):
        """Every journaled repo's rows at the commit it was last read (one Arrow table, by repo and path: the
        same whatever order the repos were read in)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        wanted = {
            (e["repo_type"], e["repo_id"]): (e["commit"], e["chunk"])
            for e in self.done.values()
            if e["chunk"] is not None
        }
        tables = []
        for chunk in sorted({chunk for _, chunk in wanted.values()}):
            table = conform(pq.read_table(self.folder / "chunks" / f"{chunk:05d}.parquet"))
            keep = [
                wanted.get((t, r)) == (c, chunk)
                for t, r, c in zip(*(table.column(k).to_pylist() for k in ("repo_type", "repo_id", "commit")))
            ]
            tables.append(table.filter(pa.array(keep)))
        if not tables:
            return row_schema().empty_table()
        return pa.concat_tables(tables).sort_by([(key, "ascending") for key in ("repo_type", "repo_id", "path")])


def read_repos(
    snapshots: list[RepoSnapshot],
    base_model: str,
    layout: Layout,
    work: WorkFolder,
    *,
    token: str | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: bool = False,
    stop_after: int | None = None,
    once: Collection[tuple[str, str]] = (),
) -> int:
    """Read every snapshot the work folder does not hold at its commit, ``workers`` repos at once (each worker
    takes the next repo as soon as it is done: a slow repo holds one worker), and journal them as they finish,
    in chunks; returns how many were read. A repo the Hub could not serve at the same commit before (``once``:
    (type, id); and those the work folder journaled so) is tried once, without the client's backoff
    (``repo_rows``): a repo that keeps answering 5xx costs one request per run, not a minute of backoff.
    ``stop_after``: stop after about that many repos (a test's stand-in for a kill)."""
    todo = [snapshot for snapshot in snapshots if not work.is_done(snapshot)]
    once = {key for s in todo if (key := (s.ref.repo_type, s.ref.repo_id)) in once or work.unavailable(s)}
    if stop_after is not None:
        todo = todo[:stop_after]
    bar = None
    if progress:
        from huggingface_hub.utils import tqdm  # off under HF_HUB_DISABLE_PROGRESS_BARS=1 or disable_progress_bars()

        bar = tqdm(total=len(todo), desc="reading repos", unit="repo")
    batch = workers * 4  # repos journaled together: a kill loses at most this many repos' reading
    results: list[RepoResult] = []

    def read(snapshot: RepoSnapshot) -> RepoResult:
        single = (snapshot.ref.repo_type, snapshot.ref.repo_id) in once
        return repo_rows(described(snapshot, token, single), base_model, layout, token, single)

    outcomes = bounded_completed(
        read,
        todo,
        workers,
        (FisherHubError,),
    )
    for count, outcome in enumerate(outcomes, 1):
        if outcome.error is not None:
            ref, retry = outcome.item.ref, isinstance(outcome.error, HubUnavailableError)
            results.append(
                RepoResult(ref.repo_id, ref.repo_type, str(ref.revision), [], [("", str(outcome.error))], retry)
            )
        else:
            results.append(outcome.result())
        if len(results) == batch or count == len(todo):
            for first in range(0, len(results), CHUNK_ROWS):
                work.add(results[first : first + CHUNK_ROWS])
            if bar is not None:
                bar.update(len(results))
            results = []
    if bar is not None:
        bar.close()
    return len(todo)


def default_work(repo: SignatureRef) -> Path:
    """Where the rows read for the index ``repo`` are kept (``FISHERHUB_INDEX_WORK``, else the user's cache)."""
    return Path(
        os.environ.get("FISHERHUB_INDEX_WORK", Path.home() / ".cache" / "fisherhub" / "index")
    ) / repo.repo_id.replace("/", "--")


def listed_adapters(
    base_model: str, token: str | None = None, *, private: bool | Collection[str] = False
) -> list[RepoSnapshot]:
    """Every adapter of ``base_model`` the Hub lists, as the listing describes it (commit, files, card): one
    listing call (paginated by the client), ``listed_infos``."""
    return [RepoSnapshot.from_info(info, "model", listed=True) for info in listed_infos(base_model, token, private)]


def listed_infos(
    base_model: str,
    token: str | None = None,
    private: bool | Collection[str] = False,
    fields: Collection[ExpandModelProperty_T] = LISTING_FIELDS,
) -> list[Any]:
    """The listing's ``ModelInfo`` (``fields``: by default commit, files, card) of every adapter of
    ``base_model``. Unsigned ones are
    kept, so the state file records them and ``update`` does not read them again while their commit stays. A
    private adapter (one ``token`` may read) is kept only where ``private`` allows it: True (for an index that is
    private itself), or its id among those given (the ones the index already holds); the others are left out,
    with a warning that counts them, so that nothing private reaches a public index."""
    from huggingface_hub import HfApi

    with hub_errors(f"the adapters of {base_model}"):
        infos = list(HfApi(token=token).list_models(filter=adapter_tag(base_model), expand=list(fields)))
    kept = [info for info in infos if not info.private or private is True or (private and info.id in private)]
    if len(kept) < len(infos):
        logger.warning(
            "left out %d private adapter(s) of %s: a public index never shows them (build a private index, "
            "--private / private=True, to include them)",
            len(infos) - len(kept),
            base_model,
        )
    return kept


#: what a new dataset repo may hold before an index is pushed into it (the Hub writes ``.gitattributes``)
NEW_REPO_FILES = frozenset({".gitattributes", "README.md"})


def check_push_target(repo: SignatureRef, token: str | None = None, force: bool = False) -> None:
    """``InputError`` unless ``repo`` may receive an index: it does not exist yet (the push creates it), holds
    nothing but ``NEW_REPO_FILES``, or is an index (it has ``STATE_PATH``); with ``force``, any repo. Anything
    else is someone's data, whose ``load_dataset`` the index's shards under ``DATA_DIR/`` would change."""
    from huggingface_hub import HfApi

    from fisherhub.hub.errors import RepoNotFoundError

    where = f"datasets/{repo.repo_id}"
    try:
        with hub_errors(where):
            info = with_retries(lambda: HfApi(token=token).repo_info(repo.repo_id, repo_type="dataset"), where)
    except RepoNotFoundError:
        return
    files = sorted(sibling.rfilename for sibling in cast("DatasetInfo", info).siblings or [])
    others = [name for name in files if name not in NEW_REPO_FILES]
    if force or not others or STATE_PATH in files:
        return
    shown = ", ".join(printable(name) for name in others[:5]) + (
        f" and {len(others) - 5} more" if len(others) > 5 else ""
    )
    raise InputError(
        f"{where} is not a signature index (no {STATE_PATH}) and holds {shown}: pushing the index would add "
        f"Parquet shards under {DATA_DIR}/ and change what load_dataset({repo.repo_id!r}) returns. Nothing was "
        "pushed. Push to a new or empty dataset repo, or pass --force (force=True) to push into this one anyway"
    )


def build_index(
    base_model: str,
    push: str,
    *,
    work: str | os.PathLike | None = None,
    layout: Layout | None = None,
    token: str | None = None,
    workers: int = DEFAULT_WORKERS,
    private: bool = False,
    progress: bool = False,
    stop_after: int | None = None,
    force: bool = False,
) -> tuple[str, IndexSummary]:
    """Gather every published signature of ``base_model``'s adapters (``find_adapters``) into the index
    ``push`` (a dataset repo) and push it; returns (the index commit, its summary). Repos are read
    ``workers`` at once; what was read is kept in ``work`` (default ``~/.cache/fisherhub/index/<org--name>``),
    so a build that was killed resumes where it stopped (repos whose commit moved since are read again).
    ``push`` is checked first (``check_push_target``): a repo that holds other data than an index is refused
    unless ``force``."""
    base_model, layout = canonical_model_id(base_model), layout or Layout()
    repo = index_ref(push)
    check_push_target(repo, token, force)
    folder = WorkFolder(work or default_work(repo), base_model, layout)
    snapshots = listed_adapters(base_model, token, private=private)
    if not snapshots:
        raise InputError(
            f"the Hub lists no adapters of {base_model!r} (tag base_model:adapter:{base_model}): nothing to index"
        )
    read_repos(
        snapshots, base_model, layout, folder, token=token, workers=workers, progress=progress, stop_after=stop_after
    )
    if stop_after is not None:
        raise InterruptedBuild(f"stopped after {stop_after} repos; run again to resume")
    listed = {(s.ref.repo_type, s.ref.repo_id) for s in snapshots}
    folder.done = {key: entry for key, entry in folder.done.items() if key in listed}  # repos gone since are dropped
    table = folder.table()
    return push_index(
        table, repo, base_model, layout, folder.entries(), token=token, private=private, work=folder.folder
    )


class InterruptedBuild(FisherHubError):
    """A build stopped before pushing (``stop_after``); running it again resumes."""


def indexed_repos(loaded: LoadedIndex) -> set[str]:
    """The ids of the adapters the index ``loaded`` has read (signed or not): those its build let in."""
    return {entry["repo_id"] for entry in loaded.state["repos"] if entry["repo_type"] == "model"}
