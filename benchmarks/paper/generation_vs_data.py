"""The paper suites' adapters signed from their generations against their training data (issue 35 item 2).

Experiments 4, 5 and 6 know each adapter's training data (its source domain's task data, ``common.DomainSplit``)
and the ground truth (``transfer``: the drop of each target's held-out perplexity under each source's LoRA
adapter, ``common.LoraSettings``). Each adapter is saved as a PEFT adapter folder of SmolLM2-135M-Instruct and
signed as ``fisherhub index sign --from-generations`` signs an adapter without data
(``generation_signing.adapter_generations``: the shipped prompt set, ``GenerationOptions``' samples, tokens per
sample and seed; the texts sketched under the base model with the suite's spec), beside its data signature (the
suite's own task signature). Reported side by side, per suite and LoRA seed:

- A(generation signature, data signature) of each adapter;
- the first stage (the source of highest A with the target's signature), the two-stage selection
  (``recall.DEFAULT_FIRST_STAGE``'s top ``recall.DEFAULT_K`` re-ranked by the target's own sample loss, as the
  suites compute it) and ``select_adapter``'s default second stage (``halving_scores``: that pool's first
  ``HALVING_SHORTLIST`` by successive halving within ``DEFAULT_RERANK_BUDGET`` passes over the target's own
  sample): top-1 and max regret (``scoring.selection_score``) with the candidates signed from generations, from
  training data, and a mix (half the candidates each way: ``MIX_DRAWS`` seeded assignments, averaged);
- the same for the first n samples of each adapter's run, for each n of ``--samples`` (the first n of a seeded
  run are the n samples of a smaller run), on the first suite of ``--suites`` (the others: the largest n);
- the cost of signing one adapter from n samples (``sign_adapter_from_generations``: sampling + sketch, seconds)
  at 1 and 2 threads, for each n of ``--cost-samples``.

Samples and signatures are cached per adapter (``<cache>/generations/``) and the run resumes. ``--stage adapters``
only trains what the generations need into the suite's cache (captures, prefix states, adapters);
``--stage generations`` then only samples. Writes paper_generation_signatures.{json,png} (``--output``: another
name).

    nice -n 10 python -m benchmarks.paper.generation_vs_data --suites exp4,exp6,exp5 --seeds 0
    python -m benchmarks.paper.generation_vs_data --quick    # seconds: tiny random model and domains
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from benchmarks.paper import common, recall
from benchmarks.paper.report import print_table, write_json
from benchmarks.paper.scoring import HeldOutLosses, selection_score
from fisherhub import Signature
from fisherhub.analysis.halving import BASE, successive_halving
from fisherhub.core.alignment import alignment
from fisherhub.core.registry import DEFAULT_RERANK_BUDGET, HALVING_SHORTLIST
from fisherhub.generation_signing import adapter_generations, generation_metadata, sign_adapter_from_generations
from fisherhub.options import GenerationOptions
from fisherhub.pipeline.loop import sketch_texts
from fisherhub.selection.rows import AdapterLocation

#: seeded assignments of the mix (half the candidates signed from generations, half from data), averaged
MIX_DRAWS = 10
SIGNINGS = ("data", "generations", "mix")
#: the results' default name (``--output``)
OUTPUT = "paper_generation_signatures"


def suite_domains(suite: str) -> tuple[str, Sequence[str], object]:
    """(cache group, domain names, loader) of a suite."""
    from benchmarks import domains
    from benchmarks.paper.exp5_smiles import SMILES_SUBDOMAINS

    return {
        "exp4": ("exp4_domains", common.NATURAL_DOMAINS, domains.natural_domains),
        "exp5": ("exp5_smiles", SMILES_SUBDOMAINS, domains.smiles_domains),
        "exp6": ("exp6_heldout", domains.HELDOUT_DOMAINS, domains.heldout_domains),
    }[suite]


@dataclasses.dataclass
class SuiteAdapters:
    """A suite's domains (task data, held-out data; their signatures when first asked for), its LoRA bench,
    the base model the generations run on (the bench wraps a copy of its own) and the suite's spec."""

    suite: str
    group: str
    texts: dict[str, list[str]]
    task_examples: dict[str, list[common.Example]]
    eval_examples: dict[str, list[common.Example]]
    bench: common.LoraBench
    model: object
    tokenizer: object
    spec: object
    #: where the domains' task signatures are captured (the suite's cache, or ``--tasks-cache``)
    tasks_folder: Path

    @property
    def names(self) -> list[str]:
        return list(self.texts)

    @functools.cached_property
    def signatures(self) -> list[Signature]:
        """Each domain's task signature (``common.capture_task``, cached in ``tasks_folder``)."""
        return [
            common.capture_task(self.model, self.spec, self.task_examples[name], name, self.tasks_folder)[1]
            for name in self.names
        ]

    def load_prefix_states(self) -> None:
        """The lower-layer states of every domain's documents (what the bench trains and measures on)."""
        for name in self.names:
            self.bench.prefix_states(self.task_examples[name] + self.eval_examples[name], group=name)

    @functools.cached_property
    def ledgers(self) -> list[common.Ledger]:
        """Every ledger of per-document NLLs in the suite's cache (read; ``<group>_*_nll_<config>.json``), then
        this benchmark's (where the pairs the suite's did not measure go)."""
        settings, split = common.lora_settings(), common.domain_split()
        config = common.config_key(settings, split)
        found = sorted(common.SETUP.cache_dir.glob(f"{self.group}_*_nll_{config}.json"))
        own = common.SETUP.cache_dir / "generations" / f"{self.group}_document_nll_{config}.json"
        return [common.Ledger(path) for path in found] + [common.Ledger(own)]

    def key(self, name: str) -> str:
        return f"{name}:{common.examples_key(self.task_examples[name])}"

    def eval_key(self, name: str) -> str:
        return f"{name}:{common.examples_key(self.eval_examples[name])}"

    def weights(self, name: str, seed: int) -> dict[str, torch.Tensor]:
        return self.bench.adapter(name, self.task_examples[name], seed)

    def folder(self, name: str, seed: int) -> Path:
        """The adapter as a PEFT adapter folder (``adapter_config.json`` + weights) of the base model: what
        a Hub adapter is."""
        path = self.bench.adapter_path(name, self.task_examples[name], seed)
        folder = common.SETUP.cache_dir / "generations" / "adapters" / path.name.removesuffix(".safetensors")
        if not (folder / "adapter_config.json").exists():
            temporary = Path(f"{folder}.{os.getpid()}.tmp")  # processes of other parts may write it too
            with self.bench.using(self.weights(name, seed)):
                self.bench.model.save_pretrained(temporary)
            config = json.loads((temporary / "adapter_config.json").read_text())
            config["base_model_name_or_path"] = common.base_model_id()
            (temporary / "adapter_config.json").write_text(json.dumps(config))
            try:
                os.replace(temporary, folder)
            except OSError:  # another process's is there: the same adapter
                shutil.rmtree(temporary)
        return folder


def suite_adapters(suite: str, tasks_folder: Path | None = None) -> SuiteAdapters:
    """The suite's domains split into task and held-out data, and its LoRA bench (nothing computed yet)."""
    group, names, load = suite_domains(suite)
    texts = common.domain_texts(names, load)
    model, tokenizer = common.load_base_model()
    pairs = {name: common.domain_split().split(tokenizer, texts[name]) for name in texts}
    bench_model, _ = common.load_base_model()
    bench = common.LoraBench(bench_model, common.lora_settings(), common.SETUP.cache_dir)
    spec = common.paper_spec(model, tokenizer)
    task, held_out = ({name: pair[k] for name, pair in pairs.items()} for k in (0, 1))
    tasks_folder = tasks_folder or common.SETUP.cache_dir / "tasks"
    return SuiteAdapters(suite, group, dict(texts), task, held_out, bench, model, tokenizer, spec, tasks_folder)


def run_key(options: GenerationOptions) -> str:
    """What a run of samples depends on beyond its adapter: samples, tokens per sample and seed."""
    return f"s{options.samples}t{options.max_new_tokens}g{options.generation_seed}"


def cached_generations(adapters: SuiteAdapters, name: str, seed: int, options: GenerationOptions) -> dict:
    """``{"texts", "seconds"}``: the samples of adapter (``name``, ``seed``), drawn by the library's code path
    (cached)."""
    folder = adapters.folder(name, seed)
    path = folder.parent.parent / f"{folder.name}.{run_key(options)}.json"
    if path.exists():
        return json.loads(path.read_text())
    started = time.perf_counter()
    texts = adapter_generations(
        adapters.model, adapters.tokenizer, AdapterLocation(str(folder)), common.base_model_id(), options
    )
    record = {"texts": texts, "seconds": time.perf_counter() - started, "threads": torch.get_num_threads()}
    path.with_suffix(".tmp").write_text(json.dumps(record))
    os.replace(path.with_suffix(".tmp"), path)
    return record


def generated_signature(adapters: SuiteAdapters, texts: list[str], options: GenerationOptions, path: Path):
    """The signature of ``texts`` under the base model with the suite's spec (cached at ``path``; the seconds
    its sketch took, and the threads, beside it: ``.seconds``)."""
    if path.exists():
        return Signature.load(path)
    metadata = {**generation_metadata(options), "base_model": common.base_model_id()}
    started = time.perf_counter()
    signature = sketch_texts(texts, adapters.model, adapters.tokenizer, adapters.spec, metadata=metadata)
    seconds = time.perf_counter() - started
    path.with_suffix(".seconds").write_text(json.dumps([seconds, torch.get_num_threads()]))
    signature.save(path)
    return signature


def adapter_signatures(adapters: SuiteAdapters, name: str, seed: int, options: GenerationOptions, samples):
    """({n: the signature of the adapter's first n samples}, the seconds its samples took, the seconds the sketch of
    the largest n took)."""
    record = cached_generations(adapters, name, seed, options)
    stem = adapters.folder(name, seed)
    signatures = {}
    for n in samples:
        path = stem.parent.parent / adapters.spec.sketch_id / f"{stem.name}.{run_key(options)}.n{n}.sig"
        path.parent.mkdir(parents=True, exist_ok=True)
        part = dataclasses.replace(options, samples=n)
        signatures[n] = generated_signature(adapters, record["texts"][:n], part, path)
    sketch = json.loads(path.with_suffix(".seconds").read_text())[0]  # the largest n's
    return signatures, record["seconds"], sketch


def generation_signatures(adapters: SuiteAdapters, seed: int, options: GenerationOptions, samples: Sequence[int]):
    """{n: [signature of the first n samples of each adapter]} and {name: [sampling seconds of the full run,
    sketch seconds of the largest n]}."""
    by_samples: dict[int, list] = {n: [] for n in samples}
    seconds = {}
    for name in adapters.names:
        signatures, *seconds[name] = adapter_signatures(adapters, name, seed, options, samples)
        for n in samples:
            by_samples[n].append(signatures[n])
    return by_samples, seconds


def document_nll(adapters: SuiteAdapters, ledgers, source: str | None, seed: int, target: str, held_out: bool):
    """Σ −log p per document of ``target``'s held-out documents (or its task data: the target's own sample)
    under adapter (``source``, ``seed``), or the base model for None: from the suite's ledger, else computed
    into this benchmark's own."""
    examples = (adapters.eval_examples if held_out else adapters.task_examples)[target]
    target_key = adapters.eval_key(target) if held_out else adapters.key(target)
    key = f"{f'{adapters.key(source)}|seed{seed}' if source else 'base'}|{target_key}"
    for ledger in ledgers:
        if key in ledger.entries:
            return ledger.entries[key]
    weights = adapters.weights(source, seed) if source else None
    with adapters.bench.using(weights) as bench:
        return ledgers[-1].get(key, lambda: bench.document_nll(examples))


def transfer(adapters: SuiteAdapters, seed: int, held_out: bool, measured: np.ndarray | None = None) -> np.ndarray:
    """[source, target]: 1 − ppl_s/ppl_base of each target's held-out documents (or own sample) under adapter
    (source, ``seed``), as ``transfer.transfer_study`` measures it; with ``measured``, only where it is true
    (elsewhere 0)."""
    names, n, ledgers = adapters.names, len(adapters.names), adapters.ledgers
    measured = ~np.eye(n, dtype=bool) if measured is None else measured
    examples = adapters.eval_examples if held_out else adapters.task_examples
    units = max(len(examples[t]) for t in names)
    counts = np.zeros((n, units))
    base = np.zeros((n, units))
    for t, target in enumerate(names):
        counts[t, : len(examples[target])] = [e.num_scored for e in examples[target]]
        base[t, : len(examples[target])] = document_nll(adapters, ledgers, None, seed, target, held_out)
    adapted = np.repeat(base[None, None], n, axis=1)
    for s, t in zip(*np.nonzero(measured)):
        row = document_nll(adapters, ledgers, names[s], seed, names[t], held_out)
        adapted[0, s, t, : len(row)] = row
    return HeldOutLosses(base, adapted, counts, relative_perplexity=True).transfer()[0]


def score_matrices(candidates: Sequence, targets: Sequence) -> dict[str, np.ndarray]:
    """A, S_a and S_e [source, target] of each candidate's signature with each target's."""
    pairs = [[alignment(c, t) for t in targets] for c in candidates]

    def matrix(value) -> np.ndarray:
        return np.array([[value(a) for a in row] for row in pairs])

    return {
        "fishersketch": matrix(lambda a: a.fisher),
        "activation": matrix(lambda a: a.activation),
        "error": matrix(lambda a: a.error),
    }


def halving_scores(adapters: SuiteAdapters, seed: int, scores: dict[str, np.ndarray]) -> np.ndarray:
    """[source, target]: ``select_adapter``'s default second stage, the pool's first ``HALVING_SHORTLIST``
    candidates of each target ranked by successive halving within ``DEFAULT_RERANK_BUDGET`` passes over the
    target's own sample (per-document losses from the ledgers); the pick highest, those not measured lowest."""
    names, n = adapters.names, len(adapters.names)
    result = np.zeros((n, n))
    for t, target in enumerate(names):
        shortlist = recall.first_stage(scores, recall.DEFAULT_FIRST_STAGE, t, min(HALVING_SHORTLIST, n - 1))
        tokens = np.array([e.num_scored for e in adapters.task_examples[target]], dtype=np.float64)

        @functools.cache
        def nll(c: int, target=target, shortlist=shortlist) -> np.ndarray:
            source = None if c == BASE else names[shortlist[c]]
            return np.array(document_nll(adapters, adapters.ledgers, source, seed, target, held_out=False))

        def oracle(candidates, documents, nll=nll, tokens=tokens):
            rows = np.stack([nll(c)[list(documents)] for c in candidates])
            return torch.from_numpy(rows), torch.from_numpy(tokens[list(documents)])

        outcome = successive_halving(len(shortlist), len(tokens), DEFAULT_RERANK_BUDGET, oracle)
        for rank, c in enumerate(outcome.order):
            result[shortlist[c], t] = len(outcome.order) - rank
    return result


def selection(adapters: SuiteAdapters, seed: int, candidates: Sequence, truth: np.ndarray) -> dict[str, float]:
    """Top-1 and max regret of the first stage (A), of the two-stage selection and of the default second stage
    (``halving_scores``), candidates signed as ``candidates``, targets by their data."""
    scores = score_matrices(candidates, adapters.signatures)
    sample = transfer(adapters, seed, held_out=False, measured=recall.measured_pairs(scores))
    stages = {
        "first": selection_score(torch.from_numpy(scores["fishersketch"]), torch.from_numpy(truth)),
        "two_stage": selection_score(recall.two_stage_scores(scores, sample)["two_stage"], torch.from_numpy(truth)),
        "halving": selection_score(torch.from_numpy(halving_scores(adapters, seed, scores)), torch.from_numpy(truth)),
    }
    return {f"{stage}_{key}": getattr(s, key) for stage, s in stages.items() for key in ("top1", "max_regret")}


def mixed(data: Sequence, generated: Sequence, draw: int) -> list:
    """Half the candidates (a seeded draw) signed from generations, the others from data."""
    chosen = set(random.Random(draw).sample(range(len(data)), len(data) // 2))
    return [generated[i] if i in chosen else data[i] for i in range(len(data))]


def mean_selection(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}


def seed_result(adapters: SuiteAdapters, seed: int, options: GenerationOptions, samples: Sequence[int]) -> dict:
    """Per number of samples: A(generations, data) of each adapter and the selection table of each signing."""
    data = adapters.signatures
    generated, seconds = generation_signatures(adapters, seed, options, samples)
    truth = transfer(adapters, seed, held_out=True)
    on_data = selection(adapters, seed, data, truth)
    by_samples = {}
    for n, signatures in generated.items():
        agreement = [alignment(g, d) for g, d in zip(signatures, data)]
        own = score_matrices(signatures, data)["fishersketch"]
        by_samples[str(n)] = {
            "A_generations_vs_data": {
                name: [a.fisher, a.stderrs["fisher"]] for name, a in zip(adapters.names, agreement)
            },
            # how often an adapter's generation signature is closest (highest A) to its own training data's
            "own_data_nearest": float(np.mean(own.argmax(axis=1) == np.arange(len(data)))),
            "selection": {
                "data": on_data,
                "generations": selection(adapters, seed, signatures, truth),
                "mix": mean_selection(
                    [selection(adapters, seed, mixed(data, signatures, d), truth) for d in range(MIX_DRAWS)]
                ),
            },
        }
    return {"sampling_and_sketch_seconds": seconds, "by_samples": by_samples}


def cost_curve(adapters: SuiteAdapters, options: GenerationOptions, samples: Sequence[int]) -> dict:
    """{threads: {n: seconds}} to sign the suite's first adapter (seed 0) from n samples with
    ``sign_adapter_from_generations`` (sampling + sketch), at 1 and 2 threads (cached per point)."""
    ledger = common.Ledger(common.SETUP.cache_dir / "generations" / "cost_seconds.json")
    folder = adapters.folder(adapters.names[0], 0)
    curve: dict[str, dict[str, float]] = {}
    threads_before = torch.get_num_threads()
    for threads in (1, 2):
        for n in samples:

            def timed() -> float:
                torch.set_num_threads(threads)
                started = time.perf_counter()
                sign_adapter_from_generations(
                    adapters.model,
                    adapters.tokenizer,
                    folder,
                    adapters.spec,
                    base_model=common.base_model_id(),
                    options=dataclasses.replace(options, samples=n),
                )
                return time.perf_counter() - started

            curve.setdefault(str(threads), {})[str(n)] = ledger.get(f"{folder.name}|{threads}|{n}", timed)
    torch.set_num_threads(threads_before)
    return curve


def report(args: argparse.Namespace, options: GenerationOptions) -> None:
    """Every suite's and seed's table, the cost curve, the JSON and the figure."""
    started = time.time()
    suites, cost = {}, {}
    for suite in args.suites:
        adapters = suite_adapters(suite, args.tasks_cache)
        adapters.load_prefix_states()
        suites[suite] = {"domains": adapters.names}
        samples = suite_samples(args, suite)
        suites[suite] |= {str(seed): seed_result(adapters, seed, options, samples) for seed in args.seeds}
        if not cost and args.cost_samples:
            cost = cost_curve(adapters, options, args.cost_samples)
    result = {
        "generation": dataclasses.asdict(options) | generation_metadata(options),
        "seeds": args.seeds,
        "mix_draws": MIX_DRAWS,
        "first_stage": "fishersketch (A)",
        "two_stage": f"{recall.stage_name(recall.DEFAULT_FIRST_STAGE)} top {recall.DEFAULT_K}, re-ranked by the target sample",
        "halving": f"the default second stage: {recall.stage_name(recall.DEFAULT_FIRST_STAGE)} first "
        f"{HALVING_SHORTLIST}, successive halving within {DEFAULT_RERANK_BUDGET} passes over the target sample",
        "suites": suites,
        "cost_seconds": cost,
        "cost_adapter": f"{args.suites[0]} {suites[args.suites[0]]['domains'][0]} seed 0",
        "quick": common.SETUP.quick,
    }
    print_tables(result)
    plot(result, common.SETUP.results_dir / f"{args.output}.png")
    print(f"wrote {write_json(args.output, result, started)}")


def print_tables(result: dict) -> None:
    rows = []
    for suite, data in result["suites"].items():
        for seed in map(str, result["seeds"]):
            for n, row in data[seed]["by_samples"].items():
                a = [v[0] for v in row["A_generations_vs_data"].values()]
                for signing, q in row["selection"].items():
                    rows.append(
                        [suite, seed, n, signing, float(np.mean(a)), min(a), max(a), row["own_data_nearest"]]
                        + [
                            q[f"{stage}_{key}"]
                            for stage in ("first", "two_stage", "halving")
                            for key in ("top1", "max_regret")
                        ]
                    )
    print_table(
        [
            "suite",
            "seed",
            "samples",
            "candidates",
            "mean A(gen,data)",
            "min A",
            "max A",
            "own nearest",
            "1st top-1",
            "1st max regret",
        ]
        + ["2-stage top-1", "2-stage max regret", "halving top-1", "halving max regret"],
        rows,
        title="Adapters signed from their generations vs their training data (first stage: A; two-stage: "
        f"{result['two_stage']}; mix: half each way, {result['mix_draws']} draws)",
    )
    for suite, data in result["suites"].items():
        for seed in map(str, result["seeds"]):
            sampled, sketched = np.array(list(data[seed]["sampling_and_sketch_seconds"].values())).T
            print(
                f"{suite} seed {seed}: per adapter ({result['generation']['samples']} samples, 1 thread) sampling "
                f"{np.median(sampled):.0f} s (median; {sampled.min():.0f}-{sampled.max():.0f}) + sketch "
                f"{np.median(sketched):.0f} s ({sketched.min():.0f}-{sketched.max():.0f})"
            )
    for threads, curve in result["cost_seconds"].items():
        print(
            f"cost per adapter ({result['cost_adapter']}), {threads} thread(s): "
            + ", ".join(f"{n} samples {s:.1f} s" for n, s in curve.items())
        )


def plot(result: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 3.8), layout="constrained")
    left, middle, right = figure.subplots(1, 3)
    seed = str(result["seeds"][0])
    for suite, data in result["suites"].items():
        by_samples = data[seed]["by_samples"]
        samples = [int(n) for n in by_samples]
        means = [np.mean([v[0] for v in by_samples[str(n)]["A_generations_vs_data"].values()]) for n in samples]
        left.plot(samples, means, "o-", label=suite)
        for signing, style in (("generations", "o-"), ("mix", "s--"), ("data", ":")):
            middle.plot(
                samples,
                [by_samples[str(n)]["selection"][signing]["first_top1"] for n in samples],
                style,
                label=f"{suite} {signing}",
            )
    left.set(
        xlabel="samples per adapter",
        ylabel="mean A(generation sig., data sig.)",
        title=f"one adapter, two signatures (seed {seed})",
    )
    left.legend(fontsize=7)
    middle.set(xlabel="samples per adapter", ylabel="first-stage top-1", ylim=(-0.05, 1.05), title="selection")
    middle.legend(fontsize=6, ncol=2)
    for suite, data in result["suites"].items():
        totals = [sum(v) for v in data[seed]["sampling_and_sketch_seconds"].values()]
        right.plot(
            [result["generation"]["samples"]] * len(totals), totals, "x", label=f"{suite}, each adapter, 1 thread"
        )
    for threads, curve in result["cost_seconds"].items():
        right.plot([int(n) for n in curve], list(curve.values()), "o-", label=f"{threads} thread(s)")
    right.set(xlabel="samples", ylabel="seconds per adapter", title="cost (sampling + sketch)")
    right.legend(fontsize=7)
    figure.savefig(path, dpi=110)


def prepare(args: argparse.Namespace, options: GenerationOptions) -> None:
    """``--stage adapters``: each suite's captures, prefix states, adapters and adapter folders (into the suite's
    cache); ``--stage generations``: each adapter's folder, samples and their signatures (reads the suite's cache
    only, once its adapters exist)."""
    for suite in args.suites:
        adapters = suite_adapters(suite, args.tasks_cache)
        if args.stage == "adapters":
            adapters.load_prefix_states()
            adapters.signatures  # noqa: B018 (captured into the suite's cache)
        for seed in args.seeds:
            for number, name in enumerate(adapters.names):
                if args.stage == "adapters":
                    adapters.folder(name, seed)
                elif number % args.parts == args.part:
                    _, sampled, sketched = adapter_signatures(adapters, name, seed, options, suite_samples(args, suite))
                    print(
                        f"{suite} {name} seed {seed}: sampled in {sampled:.0f} s, sketched in {sketched:.0f} s",
                        flush=True,
                    )


def suite_samples(args: argparse.Namespace, suite: str) -> list[int]:
    """The numbers of samples scored on ``suite``: ``--samples`` on the first suite, the largest on the others
    (one sketch per adapter)."""
    return args.samples if suite == args.suites[0] else [max(args.samples)]


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--suites", default="exp4,exp5,exp6", help="comma-separated: exp4, exp5, exp6")
    parser.add_argument("--seeds", default=",".join(map(str, common.LORA_SEEDS)), help="LoRA seeds")
    parser.add_argument("--samples", default="8,16,32,64", help="numbers of samples scored (at most the run's)")
    parser.add_argument("--cost-samples", default="8,16,32,64,128", help="numbers of samples timed ('': none)")
    parser.add_argument(
        "--output", default=OUTPUT, help="the results' name: results/NAME.{json,png} (another run keeps the default's)"
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=GenerationOptions.max_new_tokens,
        help="tokens per sample (index sign's --max-new-tokens)",
    )
    parser.add_argument(
        "--tasks-cache",
        type=Path,
        help="where the domains' task signatures are captured (default: the suite's cache; another folder leaves it "
        "untouched)",
    )
    parser.add_argument("--stage", choices=("adapters", "generations", "report"), default="report")
    parser.add_argument(
        "--part", default="0/1", help="--stage generations: adapter i of every N (i/N: N processes, each its own part)"
    )
    known, rest = parser.parse_known_args(argv)
    common.paper_arguments(__doc__.splitlines()[0], argv=rest)
    known.suites = known.suites.split(",")
    known.part, known.parts = (int(x) for x in known.part.split("/"))
    known.seeds = [int(s) for s in known.seeds.split(",")]
    known.samples = sorted({int(n) for n in known.samples.split(",")})
    known.cost_samples = sorted({int(n) for n in known.cost_samples.split(",") if n})
    if common.SETUP.quick:
        known.suites, known.seeds, known.samples, known.cost_samples = ["exp4"], [0], [20], [20]
    return known


def generation_options(args: argparse.Namespace) -> GenerationOptions:
    """The library's defaults (those of ``index sign --from-generations``) with ``--max-new-tokens`` and samples
    enough for the largest n scored; a quick run: 8 tokens per sample."""
    if common.SETUP.quick:
        return GenerationOptions(samples=max(args.samples), max_new_tokens=8)
    return GenerationOptions(samples=max(*args.samples, GenerationOptions.samples), max_new_tokens=args.max_new_tokens)


def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    options = generation_options(args)
    if args.stage != "report":
        prepare(args, options)
        return
    report(args, options)


if __name__ == "__main__":
    main()
