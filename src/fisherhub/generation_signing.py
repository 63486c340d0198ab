"""Signatures of adapters from their own samples (``fisherhub index sign --from-generations``, SPEC §3b): an
adapter of a base model that carries no signature and has no row in the index (its card names no dataset, or
none that the indexer could read) is loaded onto the base model, ``GenerationOptions.samples`` texts are drawn
from it at temperature 1 over the shipped prompt set (``data.generation_prompts``, ``lm.generation``), and the
texts are sketched under the base model alone, with the spec of the index's rows. A fallback: what an adapter
writes unprompted is not its training data, and the signature says so (``source: generated``, the prompt set,
the number of samples, the seed, the tokens per sample), as do the rows, tables and verdicts that show it.

The files go into the index's own dataset repo (``.fisher_signatures/generated/``), never into the adapters'
repos; their rows are ``obtained: generated``. Finished adapters are journaled in a work folder of their
options, so a killed run resumes without sampling them again. Under ``accelerate launch`` with N processes,
adapter i goes to process i mod N; the main process gathers every outcome and alone pushes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

from fisherhub.core.errors import FisherHubError
from fisherhub.core.registry import GENERATED_SOURCE
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.data.generation_prompts import PROMPT_SET, PROMPTS
from fisherhub.hub.signature_index.build import InterruptedBuild, default_work
from fisherhub.hub.signature_index.rows import read_rows
from fisherhub.hub.signature_index.store import load_index
from fisherhub.options import GenerationOptions
from fisherhub.pipeline.index_signing import (
    GENERATED_FOLDER,
    SignJournal,
    signature_file_name,
    common_spec,
    publish_rows,
    unsigned_adapters,
)
from fisherhub.selection.errors import Skip
from fisherhub.selection.peft_loading import brief, checked_adapter_on
from fisherhub.selection.rows import AdapterLocation

GENERATED = GENERATED_SOURCE
SIGNED_BY = "fisherhub index sign --from-generations"


@dataclasses.dataclass(frozen=True)
class AdapterOutcome:
    """One adapter without data to sketch: its commit, what came of it (``generated`` or ``skipped``, with the
    reason), and the file of its signature in the index repo."""

    adapter: str
    revision: str
    status: str
    reason: str | None = None
    file: str | None = None


@dataclasses.dataclass(frozen=True)
class GenerationReport:
    """What ``sign_from_generations`` did: the unsigned adapters listed, those without a row in the index
    (the ones tried), each one's outcome, the rows added, the index commit pushed (None when nothing was
    added), and the sampling every signature records (``generation_metadata``)."""

    unsigned: int
    without_rows: int
    adapters: list[AdapterOutcome]
    rows_added: int
    commit: str | None
    sampling: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        generated = sum(o.status == "generated" for o in self.adapters)
        sampling = ", ".join(f"{key.removeprefix('generation_')} {value}" for key, value in self.sampling.items())
        out = [
            f"{self.unsigned} unsigned adapters, {self.without_rows} with no row in the index; {generated} signed "
            f"from their generations ({sampling}), {self.rows_added} rows added"
        ]
        return out + [f"  skipped {o.adapter}: {o.reason}" for o in self.adapters if o.status == "skipped"]


def generation_metadata(options: GenerationOptions) -> dict[str, str]:
    """The provenance of a generated signature's samples: the source, the prompt set, the number of samples,
    the seed, the tokens per sample and the temperature."""
    return {
        "source": GENERATED,
        "generation_prompts": PROMPT_SET,
        "generation_samples": str(options.samples),
        "generation_seed": str(options.generation_seed),
        "generation_max_new_tokens": str(options.max_new_tokens),
        "generation_temperature": "1",
    }


def adapter_generations(
    model,
    tokenizer,
    adapter: AdapterLocation,
    base_model: str | None,
    options: GenerationOptions,
    token: str | None = None,
    max_adapter_bytes: int | None = None,
) -> list[str]:
    """The seeded temperature-1 samples of ``adapter`` on ``model`` (``lm.generation.sample_texts`` over the
    shipped ``PROMPTS``, as ``options`` sets them); ``Skip`` with the reason when it cannot be loaded or sampled."""
    from fisherhub.lm.generation import sample_texts

    with checked_adapter_on(model, adapter, base_model, token, max_adapter_bytes) as peft_model:
        try:
            return sample_texts(
                peft_model,
                tokenizer,
                PROMPTS,
                samples=options.samples,
                max_new_tokens=options.max_new_tokens,
                seed=options.generation_seed,
                batch_size=options.generation_batch_size,
            )
        except RuntimeError as exc:
            raise Skip(f"sampling from it fails ({brief(exc)})") from exc


def sign_adapter_from_generations(
    model,
    tokenizer,
    adapter: str | os.PathLike | AdapterLocation,
    spec: SketchSpec | None = None,
    *,
    base_model: str,
    revision: str | None = None,
    options: GenerationOptions | None = None,
    token: str | None = None,
    max_adapter_bytes: int | None = None,
) -> Signature:
    """The signature of what ``adapter`` generates: samples drawn from ``model`` (the base model) + ``adapter``,
    sketched under ``model`` alone with ``spec`` (None: a new one).

    Args:
        model (`torch.nn.Module`):
            The base model (plain; the adapter is taken out again afterwards).
        tokenizer (`PreTrainedTokenizerBase`):
            Its tokenizer.
        adapter (`str`, `os.PathLike` or `AdapterLocation`):
            The adapter: a Hub repo id, a local folder, or where it loads from (``AdapterLocation``).
        spec (`SketchSpec`, *optional*):
            The sketch (that of the rows it is compared with); None makes a default one.
        base_model (`str`):
            The base model's id, recorded and checked against the adapter's config.
        revision (`str`, *optional*):
            The adapter repo's revision (for an id; an ``AdapterLocation`` has its own).
        options (`GenerationOptions`, *optional*):
            Samples, tokens per sample, seed, batch size.
        token (`str`, *optional*):
            Hub token.
        max_adapter_bytes (`int`, *optional*):
            The largest adapter weights file loaded (default: the base model's parameters at 4 bytes each).

    Returns:
        `Signature`: its metadata says ``source: generated`` with the prompt set, samples, seed and tokens per
        sample.

    Raises:
        `FisherHubError`: the adapter cannot be loaded or sampled (the reason), or its samples are too few to
            sketch.
    """
    from fisherhub.pipeline.loop import sketch_texts

    options = options or GenerationOptions()
    if not isinstance(adapter, AdapterLocation):
        adapter = AdapterLocation(os.fspath(adapter), revision)
    try:
        texts = adapter_generations(model, tokenizer, adapter, base_model, options, token, max_adapter_bytes)
    except Skip as exc:
        raise FisherHubError(exc.reason) from exc
    where = f"{adapter.path}@{adapter.revision}" if adapter.revision else adapter.path
    metadata = {
        **generation_metadata(options),
        "dataset": f"<generations of {where}>",
        "adapter": adapter.path,
        "adapter_revision": adapter.revision or "",
        "base_model": base_model,
        "signed_by": SIGNED_BY,
    }
    return sketch_texts(texts, model, tokenizer, spec, metadata=metadata)


def sign_from_generations(
    base_model: str,
    index: str,
    *,
    model,
    tokenizer,
    options: GenerationOptions | None = None,
    work: str | Path | None = None,
    token: str | None = None,
    max_adapter_bytes: int | None = None,
    stop_after: int | None = None,
    progress: bool = False,
) -> GenerationReport | None:
    """Sign, from their generations (``sign_adapter_from_generations``), every adapter of ``base_model`` that
    has no signature and no row in the index ``index`` (built, and signed from the cards, before), with the spec
    of the index's most common rows, and add their rows to the index. ``stop_after``: stop after this process
    signed that many (a stand-in for a kill). Under N processes each signs its share; the main process returns
    the report, the others None. ``progress``: a bar over this process's adapters."""
    from accelerate import PartialState
    from accelerate.utils import gather_object
    from huggingface_hub import HfApi

    from fisherhub.pipeline.launch import warn_if_fewer_processes
    from fisherhub.pipeline.processes import no_accelerator

    options = options or GenerationOptions()
    loaded = load_index(index, token)
    spec = common_spec(read_rows(loaded.table, base_model, f"datasets/{loaded.ref.repo_id}", loaded.commit))
    indexed = set(loaded.table.column("repo_id").to_pylist())
    unsigned = unsigned_adapters(base_model, token, loaded)
    todo = [s for s in unsigned if s.ref.repo_id not in indexed]
    state = PartialState(cpu=no_accelerator())
    warn_if_fewer_processes(state.num_processes, "index sign --from-generations")
    folder = Path(work or default_work(loaded.ref)) / "sign" / _options_folder(options)
    journal = SignJournal(folder, state.process_index, GENERATED)
    sign_one = functools.partial(
        sign_adapter_from_generations,
        model,
        tokenizer,
        spec=spec,
        base_model=base_model,
        options=options,
        token=token,
        max_adapter_bytes=max_adapter_bytes,
    )
    outcomes = _sign_share(todo[state.process_index :: state.num_processes], journal, sign_one, stop_after, progress)
    outcomes = gather_object(outcomes)
    if not state.is_main_process:
        return None
    order = [s.ref.repo_id for s in todo]
    outcomes.sort(key=lambda outcome: order.index(outcome.adapter))
    signed = [o for o in outcomes if o.status == GENERATED]
    report = GenerationReport(len(unsigned), len(todo), outcomes, 0, None, generation_metadata(options))
    if not signed:
        return report
    journal = SignJournal(folder, kind=GENERATED)
    files = {o.file: journal.folder / journal.done[(o.adapter, o.revision)] for o in signed}
    snapshots = {s.ref.repo_id: s for s in todo}
    rows = [(snapshots[o.adapter], o.file, GENERATED) for o in signed]
    message = "signatures sketched from adapters' generations"
    added, commit = publish_rows(loaded, HfApi(token=token), folder, files, rows, message, token)
    return dataclasses.replace(report, rows_added=added, commit=commit)


def _options_folder(options: GenerationOptions) -> str:
    """The journal's folder for one sampling (signatures of other options are not resumed from it)."""
    return f"generated-{PROMPT_SET}-{options.samples}x{options.max_new_tokens}-seed{options.generation_seed}"


def _sign_share(snapshots, journal: SignJournal, sign_one, stop_after: int | None, progress: bool):
    """One ``AdapterOutcome`` per adapter of this process's share: signed (``sign_one``) unless the journal has it
    at its commit, or skipped with the reason."""
    from huggingface_hub.utils import tqdm

    outcomes, signed_now = [], 0
    for snapshot in tqdm(snapshots, desc="signing from generations", unit="adapter", disable=not progress):
        adapter, revision = snapshot.ref.repo_id, str(snapshot.ref.revision)
        if (adapter, revision) not in journal.done:
            if stop_after is not None and signed_now >= stop_after:
                raise InterruptedBuild(f"stopped after signing {stop_after} adapters; run again to resume")
            try:
                signature = sign_one(AdapterLocation(adapter, revision))
            except FisherHubError as exc:
                outcomes.append(AdapterOutcome(adapter, revision, "skipped", str(exc)))
                continue
            journal.add(adapter, revision, signature)
            signed_now += 1
        outcomes.append(
            AdapterOutcome(adapter, revision, GENERATED, None, signature_file_name(adapter, revision, GENERATED_FOLDER))
        )
    return outcomes
