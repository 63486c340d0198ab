"""Pick the PEFT LoRA adapter whose training data is closest to a target task, without training or running
any adapter: rank candidates by the Fisher alignment of their signatures with the target's (SPEC §1).

For candidate c and target t (same sketch id) the score is Â(c, t) = ⟨μ̂_c, μ̂_t⟩ / √(⟨μ̂^A_c, μ̂^B_c⟩⟨μ̂^A_t, μ̂^B_t⟩),
with the sketch's standard error; ``score="activation"`` (Ŝ_a) and ``score="error"`` (Ŝ_e) rank by one factor
only, for comparison (S_a cannot tell tasks apart whose activations are alike: SPEC §5).

    selection = select_adapter(["target text", ...], ["org/adapter-a", "org/adapter-b"], base_model="org/base")
    print(selection.table())
    model = selection.load(base_model)          # a PeftModel with the best adapter active
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fisherhub.core.alignment import AlignmentResult, alignment
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.core.errors import FisherHubError, InputError, TooFewDocumentsError

if TYPE_CHECKING:
    from fisherhub.data import DataArgs

SCORES = ("fisher", "activation", "error")
SCORE_LABELS = {"fisher": "A (Fisher)", "activation": "S_a (activation)", "error": "S_e (error)"}
_COMMIT_ID = re.compile(r"@[0-9a-f]{40}\b")
_STDERR_FIELDS = {"fisher": "stderr", "activation": "activation_stderr", "error": "error_stderr"}
ADAPTER_CONFIG = "adapter_config.json"
SIGNATURE_FOLDER = "fisher_signatures"


class NoCompatibleCandidatesError(FisherHubError):
    """No candidate could be ranked against the target; ``skipped`` says why for each."""

    def __init__(self, skipped: Sequence[Skipped], what: str = "candidate"):
        self.skipped = list(skipped)
        reasons = "\n".join(f"  - {s.candidate}: {s.reason}" for s in self.skipped)
        super().__init__(
            f"no {what} can be compared with the target:\n{reasons}\n"
            "Pass adapters of the target's base model that carry signatures (`fisherhub push` one into the "
            "adapter repo, or into the dataset repo its card names under `datasets:`)."
        )


class _Skip(Exception):
    """Internal: this candidate cannot be ranked, for ``reason``."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# -- results ------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class AdapterLocation:
    """Where ``peft`` loads an adapter from: a Hub repo id (at ``revision``) or a local folder."""

    path: str
    revision: str | None = None


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A candidate left out of the ranking, and why."""

    candidate: str
    reason: str


@dataclasses.dataclass(frozen=True)
class RankedCandidate:
    """One row of a ranking: the candidate's alignment with the target and where its signature came from.
    ``adapter`` is None for a dataset repo (ranked, but nothing to load)."""

    candidate: str
    score_name: str
    alignment: AlignmentResult
    signature_source: str
    adapter: AdapterLocation | None

    @property
    def score(self) -> float:
        return getattr(self.alignment, self.score_name)

    @property
    def stderr(self) -> float:
        return getattr(self.alignment, _STDERR_FIELDS[self.score_name])

    @property
    def fisher(self) -> float:
        return self.alignment.fisher

    @property
    def activation(self) -> float:
        return self.alignment.activation

    @property
    def error(self) -> float:
        return self.alignment.error

    @property
    def coupling(self) -> float | None:
        return self.alignment.coupling

    def ranked_by(self, score: str) -> RankedCandidate:
        return dataclasses.replace(self, score_name=check_score(score))


def check_score(score: str) -> str:
    if score not in SCORES:
        raise InputError(f"score must be one of {SCORES} (Fisher alignment, activation or error only), got {score!r}")
    return score


def _format(value: float | None, stderr: float | None = None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if stderr is None else f"{value:.3f} ± {stderr:.3f}"


@dataclasses.dataclass
class Selection:
    """Candidates ranked by ``score`` (best first), the ones skipped and why, and the target's signatures
    (one per sketch id the candidates use)."""

    ranking: list[RankedCandidate]
    skipped: list[Skipped]
    score: str
    targets: dict[str, Signature]
    base_model: str | None = None
    model: Any = None  # the PeftModel, when select_adapter(load=True)

    @property
    def best(self) -> RankedCandidate:
        return self.ranking[0]

    def ranked_by(self, score: str) -> list[RankedCandidate]:
        """The same candidates ranked by another score (``fisher``, ``activation`` or ``error``)."""
        rows = [row.ranked_by(score) for row in self.ranking]
        return sorted(rows, key=lambda row: row.score, reverse=True)

    # -- display ------------------------------------------------------------------------------------
    def _table_rows(self, limit: int | None) -> tuple[list[str], list[list[str]]]:
        header = ["#", "candidate", f"score: {SCORE_LABELS[self.score]}", "A", "S_a", "S_e", "ρ", "signature source"]
        rows = [
            [
                str(rank),
                row.candidate,
                _format(row.score, row.stderr),
                _format(row.fisher),
                _format(row.activation),
                _format(row.error),
                _format(row.coupling),
                _COMMIT_ID.sub(lambda match: match.group(0)[:8], row.signature_source),  # @ + 7 hex digits
            ]
            for rank, row in enumerate(self.ranking[:limit], start=1)
        ]
        return header, rows

    def rich_table(self, limit: int | None = None):
        """The ranking as a ``rich.table.Table`` (the skipped candidates in its caption)."""
        from rich.table import Table

        header, rows = self._table_rows(limit)
        table = Table(
            *header, title=f"candidates ranked by {SCORE_LABELS[self.score]}", caption=self._skipped_text() or None,
            caption_justify="left",
        )
        for row in rows:
            table.add_row(*row)
        return table

    def table(self, limit: int | None = None) -> str:
        """The ranking as plain text: rank, candidate, score ± stderr, A, S_a, S_e, ρ, signature source; then
        the skipped candidates with their reasons."""
        header, rows = self._table_rows(limit)
        widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]]
        lines.insert(1, "  ".join("-" * width for width in widths))
        skipped = self._skipped_text()
        return "\n".join(lines) + (f"\n{skipped}" if skipped else "")

    def _skipped_text(self) -> str:
        return "\n".join(["skipped:", *(f"  {s.candidate}: {s.reason}" for s in self.skipped)]) if self.skipped else ""

    def __str__(self) -> str:
        return self.table()

    def figure(self, limit: int | None = None):
        """Bar chart, a ``matplotlib.figure.Figure`` (made without pyplot): A, S_a and S_e of each candidate
        with ±1 stderr error bars, candidates in ranking order (the first ``limit``)."""
        import numpy as np
        from matplotlib.figure import Figure

        rows = self.ranking[:limit]
        positions = np.arange(len(rows))
        width = 0.8 / len(SCORES)
        figure = Figure(figsize=(max(4.0, 1.2 * len(rows) + 2.0), 3.8), layout="constrained")
        axes = figure.subplots()
        for offset, score in enumerate(SCORES):
            ranked = [row.ranked_by(score) for row in rows]
            axes.bar(
                positions + (offset - 1) * width,
                [row.score for row in ranked],
                width,
                yerr=[row.stderr for row in ranked],
                capsize=3,
                label=SCORE_LABELS[score],
            )
        axes.set_xticks(positions, [row.candidate for row in rows], rotation=20, ha="right", fontsize=8)
        axes.set_ylabel("alignment with the target")
        axes.set_title(f"ranked by {SCORE_LABELS[self.score]}; best: {self.best.candidate}", fontsize=10)
        axes.axhline(0.0, color="black", linewidth=0.6)
        figure.legend(loc="outside lower center", ncol=len(SCORES), fontsize=8)
        return figure

    def plot(self, path: str | os.PathLike, limit: int | None = None) -> Path:
        """Write ``figure(limit)`` to ``path`` (PNG, or any format matplotlib infers from the suffix); return it."""
        path = Path(path)
        self.figure(limit).savefig(path, dpi=120)
        return path

    # -- loading ------------------------------------------------------------------------------------
    def load(self, model=None, top_k: int | None = None):
        """A ``peft.PeftModel`` on ``model`` (the base model; None loads ``base_model``) with the best adapter
        active; with ``top_k`` the k best are loaded as named adapters (``set_adapter(name)`` switches;
        ``peft_config`` lists them by name). The base model is modified in place, as ``peft`` does."""
        from peft import PeftModel

        count = 1 if top_k is None else top_k
        if not isinstance(count, int) or count < 1:
            raise InputError(f"top_k must be a positive int, got {top_k!r}")
        rows = self.ranking[:count]
        datasets_only = [row.candidate for row in rows if row.adapter is None]
        if datasets_only:
            raise InputError(
                f"dataset repos, not adapters, ranked among the top {count}: {', '.join(datasets_only)}; nothing to "
                "load for them. Pass adapter repos (or local adapter folders) as candidates, or a smaller top_k"
            )
        if model is None:
            model = _load_base_model(self.base_model)[0]
        names = adapter_names([row.candidate for row in rows])
        first = rows[0].adapter
        peft_model = PeftModel.from_pretrained(model, first.path, adapter_name=names[0], revision=first.revision)
        for row, name in zip(rows[1:], names[1:]):
            peft_model.load_adapter(row.adapter.path, adapter_name=name, revision=row.adapter.revision)
        peft_model.set_adapter(names[0])
        return peft_model.eval()


def adapter_names(candidates: Sequence[str]) -> list[str]:
    """Distinct adapter names for ``peft`` (identifiers: ``org/lora-a`` -> ``lora_a``, repeats get ``_2``...)."""
    names: list[str] = []
    for candidate in candidates:
        base = re.sub(r"\W+", "_", Path(candidate.rstrip("/")).name).strip("_") or "adapter"
        name, repeat = base, 1
        while name in names:
            repeat += 1
            name = f"{base}_{repeat}"
        names.append(name)
    return names


# -- candidates: where their signatures come from -------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _SignatureOption:
    """A signature a candidate could be compared with; ``load`` fetches it (Hub signatures lazily)."""

    sketch_id: str
    base_model: str | None
    source: str
    load: Callable[[], Signature]


@dataclasses.dataclass(frozen=True)
class _Candidate:
    name: str
    adapter: AdapterLocation | None
    options: list[_SignatureOption]


def _local_option(path: Path) -> _SignatureOption:
    try:
        signature = Signature.load(path)
    except FisherHubError as exc:
        raise _Skip(f"unreadable signature: {exc}") from exc
    return _SignatureOption(signature.sketch_id, signature.metadata.get("base_model"), str(path), lambda: signature)


def _hub_options(repo_id: str, repo_type: str, revision: str | None = None) -> list[_SignatureOption]:
    """The loadable signatures of a Hub repo (headers only; tensors are fetched when chosen)."""
    from fisherhub.hub import list_signatures, load_signature

    options = []
    for info in list_signatures(repo_id, repo_type, revision):
        if info.problem is None and info.sketch_id:
            ref = info.ref.short()
            options.append(_SignatureOption(info.sketch_id, info.base_model, ref, lambda ref=ref: load_signature(ref)))
    return options


def _matches_base(option: _SignatureOption, base_model: str | None) -> bool:
    return base_model is None or option.base_model in (None, base_model)


def _with_training_data(
    options: list[_SignatureOption], datasets: Any, base_model: str | None
) -> list[_SignatureOption]:
    """The adapter's own signatures, plus, when none is for ``base_model``, those of the dataset repos its card
    names as training data (``datasets:``)."""
    from fisherhub.hub import HubError

    if any(_matches_base(option, base_model) for option in options):
        return options
    names = [datasets] if isinstance(datasets, str) else list(datasets or [])
    for name in names:
        try:
            options = [*options, *_hub_options(str(name), "dataset")]
        except HubError:  # a dataset named in the card but not on this Hub carries no signature
            continue
    return options


def _check_adapter_base(adapter_base: str | list[str] | None, base_model: str | None) -> None:
    """``adapter_base``: what the adapter config or card names (a card may list several)."""
    bases = [adapter_base] if isinstance(adapter_base, str) else list(adapter_base or [])
    if base_model and bases and base_model not in bases:
        raise _Skip(f"other base model: the adapter is for {', '.join(map(repr, bases))}, not {base_model!r}")


def _local_candidate(folder: Path, base_model: str | None) -> _Candidate:
    from huggingface_hub import RepoCard

    config = folder / ADAPTER_CONFIG
    if not config.is_file():
        raise _Skip(f"not an adapter: the folder has no {ADAPTER_CONFIG} (save it with PeftModel.save_pretrained)")
    _check_adapter_base(json.loads(config.read_text()).get("base_model_name_or_path"), base_model)
    options = [_local_option(path) for path in sorted((folder / SIGNATURE_FOLDER).glob("*.safetensors"))]
    card = folder / "README.md"
    datasets = RepoCard.load(card).data.get("datasets") if card.is_file() else None
    options = _with_training_data(options, datasets, base_model)
    return _Candidate(str(folder), AdapterLocation(str(folder)), options)


def _hub_candidate(name: str, base_model: str | None) -> _Candidate:
    from huggingface_hub import HfApi

    from fisherhub.hub import HubError, SignatureRef
    from fisherhub.hub.errors import hub_errors

    ref = SignatureRef.parse(name)
    if ref is None or ref.path is not None:
        raise _Skip("not a local adapter folder, nor a Hub repo id (org/name, datasets/org/name, with @revision)")
    try:
        if ref.repo_type == "dataset":
            return _Candidate(name, None, _hub_options(ref.repo_id, "dataset", ref.revision))
        with hub_errors(str(ref)):
            info = HfApi().model_info(ref.repo_id, revision=ref.revision)
        files = {sibling.rfilename for sibling in info.siblings or []}
        if ADAPTER_CONFIG not in files:
            raise _Skip(f"not an adapter: the model repo has no {ADAPTER_CONFIG} (a full model, not a PEFT adapter)")
        card = info.card_data or {}
        _check_adapter_base(card.get("base_model"), base_model)
        options = _with_training_data(_hub_options(ref.repo_id, "model", info.sha), card.get("datasets"), base_model)
    except HubError as exc:
        raise _Skip(str(exc)) from exc
    return _Candidate(name, AdapterLocation(ref.repo_id, ref.revision), options)


def _resolve_candidate(name: str | os.PathLike, base_model: str | None) -> _Candidate:
    text = os.fspath(name)
    if os.path.isdir(text):
        return _local_candidate(Path(text), base_model)
    return _hub_candidate(text, base_model)


def _for_base_model(candidate: _Candidate, base_model: str | None) -> list[_SignatureOption]:
    if not candidate.options:
        raise _Skip("no signature: neither the adapter nor the dataset repos its card names carry one")
    if base_model is None:
        return candidate.options
    matching = [option for option in candidate.options if _matches_base(option, base_model)]
    if not matching:
        others = sorted({str(option.base_model) for option in candidate.options})
        raise _Skip(f"other base model: its signatures are for {', '.join(others)}, not {base_model!r}")
    return matching


# -- the target ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SketchOptions:
    """How a target given as texts or a dataset is sketched (with each candidate's spec, ``like=``)."""

    data: DataArgs | None = None  # columns, split, limits of a dataset target (its ``dataset`` is replaced)
    batch_size: int = 8
    max_length: int = 512
    progress: bool = True


class _Target:
    """The target's signatures by sketch id: given ones, or sketched on demand with a candidate's spec."""

    def __init__(self, signatures: Sequence[Signature] = (), sketcher: _TargetSketcher | None = None):
        self.signatures = {signature.sketch_id: signature for signature in signatures}
        self.sketcher = sketcher

    def like(self, candidate: Signature) -> Signature:
        """The target's signature with ``candidate``'s sketch id (``_Skip`` when there is none)."""
        if candidate.sketch_id not in self.signatures:
            if self.sketcher is None:
                differences = next(iter(self.signatures.values())).spec.differences(candidate.spec)
                fields = ", ".join(f"{k}: target {mine!r} vs {theirs!r}" for k, (mine, theirs) in differences.items())
                raise _Skip(f"other sketch id {candidate.sketch_id} ({fields}); sketch the target like= it")
            self.signatures[candidate.sketch_id] = self.sketcher(candidate)
        return self.signatures[candidate.sketch_id]


def _load_base_model(base_model: str | None):
    from fisherhub.defaults import load_model_and_tokenizer

    if base_model is None:
        raise InputError(
            "the base model is unknown: pass base_model= (a Hub id or local folder) or model= and tokenizer="
        )
    return load_model_and_tokenizer(base_model)


class _TargetSketcher:
    """Sketches a texts / dataset target with a candidate's spec, loading the base model on first use."""

    def __init__(self, target: Any, model, tokenizer, base_model: str | None, options: SketchOptions):
        self.target, self.model, self.tokenizer = target, model, tokenizer
        self.base_model, self.options = base_model, options

    def _model(self):
        if self.model is None or self.tokenizer is None:
            loaded_model, loaded_tokenizer = _load_base_model(self.base_model)
            self.model = self.model if self.model is not None else loaded_model
            self.tokenizer = self.tokenizer if self.tokenizer is not None else loaded_tokenizer
        return self.model, self.tokenizer

    def __call__(self, like: Signature) -> Signature:
        from fisherhub import capture
        from fisherhub.data import DataArgs
        from fisherhub.sketcher import sketch_dataset, sketch_texts

        model, tokenizer = self._model()
        try:
            spec: SketchSpec = capture.spec_for_model(model, tokenizer, like=like)
        except InputError as exc:
            raise _Skip(f"other base model: {exc}") from exc
        options = self.options
        common = {
            "batch_size": options.batch_size,
            "progress": options.progress,
            "metadata": {"base_model": self.base_model or like.metadata.get("base_model", "")},
        }
        try:
            if isinstance(self.target, list):
                return sketch_texts(self.target, model, tokenizer, spec, max_length=options.max_length, **common)
            data = options.data or DataArgs(self.target, max_length=options.max_length)
            return sketch_dataset(self.target, model, tokenizer, spec, data=data, **common)
        except TooFewDocumentsError as exc:
            raise TooFewDocumentsError(
                f"the target has too few tokens to sketch: {exc} Give the target more text (a few dozen documents "
                "or a few hundred scored tokens at least)."
            ) from exc


def _target_signatures(target: str | os.PathLike, base_model: str | None) -> list[Signature]:
    """The signatures a reference names: a local file, or a Hub reference (a repo: all its signatures for
    ``base_model``)."""
    from fisherhub.hub import SignatureRef, load_signature

    text = os.fspath(target)
    ref = SignatureRef.parse(text)
    if os.path.isfile(text) or ref is None or ref.path is not None:
        return [load_signature(text)]  # a file, or a clear error for what is not a reference
    options = _hub_options(ref.repo_id, ref.repo_type, ref.revision)
    matching = [option.load() for option in options if _matches_base(option, base_model)]
    if not matching:
        wanted = f" for {base_model}" if base_model else ""
        raise InputError(f"{text}: the repo has no signature{wanted} to use as the target (`fisherhub list` it)")
    return matching


def _is_signature_ref(target: str) -> bool:
    """Signature files (``.safetensors``) and Hub signature references (``hf://``, ``datasets/...``, ``...:path``)
    name signatures; any other string names a dataset to sketch (Hub id, folder or data file)."""
    if os.path.exists(target):
        return os.path.isfile(target) and target.endswith(".safetensors")
    return target.startswith(("hf://", "datasets/")) or ":" in target


def _make_target(target: Any, model, tokenizer, base_model: str | None, options: SketchOptions) -> _Target:
    if isinstance(target, Signature):
        return _Target([target])
    if isinstance(target, (str, os.PathLike)) and _is_signature_ref(os.fspath(target)):
        return _Target(_target_signatures(target, base_model))
    if isinstance(target, (list, tuple)):
        if not target or not all(isinstance(text, str) for text in target):
            raise InputError("a target list must hold texts (strings), at least one")
        target = list(target)
    elif not isinstance(target, (str, os.PathLike)) and not hasattr(target, "column_names"):
        raise InputError(
            f"target must be a Signature, a signature reference, a datasets Dataset or id, or a list of texts; "
            f"got {type(target).__name__}"
        )
    return _Target(sketcher=_TargetSketcher(target, model, tokenizer, base_model, options))


# -- the selection ------------------------------------------------------------------------------------
def _discover(base_model: str | None) -> list[str]:
    from fisherhub.hub import find_adapters

    if base_model is None:
        raise InputError("no candidates given: pass adapter repo ids or folders, or base_model= to discover adapters")
    found = find_adapters(base_model)
    if not found:
        raise InputError(
            f"no candidates: the Hub lists no adapters of {base_model!r} (tag base_model:adapter:{base_model}). "
            "Pass adapter repo ids or local adapter folders explicitly"
        )
    return found


def _choose_options(candidates: list[_Candidate], base_model: str | None, target: _Target, skipped: list[Skipped]):
    """Per candidate, the signature option to compare: one whose sketch id the target has, else the sketch id
    most candidates share (so a texts target is sketched as few times as possible)."""
    usable: list[tuple[_Candidate, list[_SignatureOption]]] = []
    for candidate in candidates:
        try:
            usable.append((candidate, _for_base_model(candidate, base_model)))
        except _Skip as skip:
            skipped.append(Skipped(candidate.name, skip.reason))
    shared = collections.Counter(sketch_id for _, options in usable for sketch_id in {o.sketch_id for o in options})
    chosen = []
    for candidate, options in usable:
        preferred = [o for o in options if o.sketch_id in target.signatures] or options
        chosen.append((candidate, max(preferred, key=lambda o: shared[o.sketch_id])))
    return chosen


def select_adapter(
    target: Any,
    candidates: Sequence[str | os.PathLike] | None = None,
    base_model: str | None = None,
    top_k: int | None = None,
    load: bool = False,
    score: str = "fisher",
    *,
    model=None,
    tokenizer=None,
    sketch: SketchOptions | None = None,
) -> Selection:
    """Rank ``candidates`` by the alignment of their training data's signature with ``target``'s.

    ``target``: a ``Signature``; a signature reference (a ``.safetensors`` file, ``datasets/org/name[:path]``,
    ``hf://...``); or data to sketch with each distinct candidate spec (``like=``) under the base model: a
    list of texts, a ``datasets`` Dataset, or a dataset id / folder / data file (``sketch`` sets columns and
    limits). ``candidates``: adapter repo ids (``org/name[@rev]``), local adapter folders (PEFT
    ``adapter_config.json``, signatures under ``fisher_signatures/``), or dataset repos (``datasets/org/name``);
    None discovers the adapters of ``base_model`` on the Hub. A candidate's signature comes from its repo or
    folder, else from the dataset repos its card names under ``datasets:``. ``base_model`` (default: the target
    signature's, else the first candidate signature's) filters signatures and adapters, and is what is loaded
    when ``model`` / ``tokenizer`` are not given. ``score``: ``fisher`` (default), ``activation``
    (S_a only) or ``error`` (S_e only). With ``load=True`` the best ``top_k`` (default 1) adapters are loaded
    onto ``model`` (or the loaded base model) into ``selection.model``.
    """
    score = check_score(score)
    if isinstance(target, Signature) and base_model is None:
        base_model = target.metadata.get("base_model") or None
    names = list(candidates) if candidates is not None else _discover(base_model)
    if not names:
        raise InputError("no candidates given: pass adapter repo ids or folders, or None and base_model= to discover")
    skipped: list[Skipped] = []
    resolved = []
    for name in names:
        try:
            resolved.append(_resolve_candidate(name, base_model))
        except _Skip as skip:
            skipped.append(Skipped(os.fspath(name), skip.reason))
    if base_model is None:
        bases = [o.base_model for c in resolved for o in c.options if o.base_model]
        base_model = bases[0] if bases else None
    options = sketch or SketchOptions()
    target_signatures = _make_target(target, model, tokenizer, base_model, options)
    ranking = []
    for candidate, option in _choose_options(resolved, base_model, target_signatures, skipped):
        try:
            signature = option.load()
        except FisherHubError as exc:  # a remote file that is not a valid signature
            skipped.append(Skipped(candidate.name, f"unreadable signature {option.source}: {exc}"))
            continue
        try:
            result = alignment(signature, target_signatures.like(signature))
        except _Skip as skip:
            skipped.append(Skipped(candidate.name, skip.reason))
            continue
        ranking.append(RankedCandidate(candidate.name, score, result, option.source, candidate.adapter))
    if not ranking:
        raise NoCompatibleCandidatesError(skipped)
    ranking.sort(key=lambda row: row.score, reverse=True)
    selection = Selection(ranking, skipped, score, dict(target_signatures.signatures), base_model)
    if load:
        sketcher = target_signatures.sketcher
        base = model if model is not None or sketcher is None else sketcher.model
        selection.model = selection.load(base, top_k)
    return selection
