"""``fisherhub index build|update|sign|show``: a base model's published signatures gathered in one Hub dataset.

``build BASE_MODEL --push datasets/ORG/NAME`` reads every adapter of BASE_MODEL the Hub lists (a bounded pool
of requests), one row per signature, and pushes the rows as Parquet (``load_dataset("ORG/NAME")`` loads them);
a build that was interrupted resumes from its work folder. ``update ORG/NAME`` reads again only the adapters
whose commit changed (one listing) and pushes their rows as one more shard (the whole index once the rows replaced
pass a tenth of those stored). ``sign BASE_MODEL --index ORG/NAME`` sketches the datasets that unsigned
adapters' cards name (each dataset@revision once, into the index repo, never into anyone's repo) and adds
their rows; with ``--from-generations`` it then signs every unsigned adapter still without a row from samples
drawn from it (base model + adapter, temperature 1, the shipped prompt set: a fallback, marked so; SPEC §3b); under ``accelerate launch [launch options] -m fisherhub index sign ...`` (``--num_processes N`` on N
GPUs, with ``--multi_gpu`` on the CPU: docs/distributed.md) the N processes split
the datasets (each sketched by one process) and the main one pushes. ``show ORG/NAME`` prints what the index holds. Rank from it with
``fisherhub select TARGET --index ORG/NAME``. ``space ORG/NAME --serve`` runs the index's browser page here (against
the Hub ``HF_ENDPOINT`` names); ``--push spaces/ORG/NAME`` creates or updates it as a Space, in one commit.
"""

from __future__ import annotations

import argparse

from fisherhub.cli.support.arguments import HelpFormatter
from fisherhub.cli.support.repo_arguments import add_token_argument
from fisherhub.cli.support.space_arguments import add_space_arguments, publish_or_serve


def _common(parser: argparse.ArgumentParser, workers: bool = True) -> None:
    from fisherhub.hub.pool import DEFAULT_WORKERS

    if workers:
        parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="repos read at once")
    parser.add_argument(
        "--work",
        default=None,
        metavar="DIR",
        help="where rows read so far are kept, to resume, and (build, update) what each push checked, so that an "
        "update from the same folder checks only the rows it reads (default ~/.cache/fisherhub/index/ORG--NAME)",
    )
    add_token_argument(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "index",
        help="gather a base model's signatures in one Hub dataset, and rank from it",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="index_command", metavar="ACTION", required=True, help="build, update, sign, show or browse an index"
    )
    for add in (_add_build, _add_update, _add_sign, _add_show, _add_space):
        add(commands)


def _add_build(commands: argparse._SubParsersAction) -> None:
    from fisherhub.hub.signature_index.layout import DEFAULT_DTYPE, INDEX_DTYPES

    build = commands.add_parser(
        "build", help="gather every published signature of a base model's adapters", formatter_class=HelpFormatter
    )
    build.add_argument("base_model", metavar="BASE_MODEL", help="the base model whose adapters are gathered")
    build.add_argument("--push", required=True, metavar="datasets/ORG/NAME", help="the dataset repo of the index")
    build.add_argument("--dtype", default=DEFAULT_DTYPE, choices=INDEX_DTYPES, help="float type of the stored sketches")
    build.add_argument(
        "--sketches",
        default="joint",
        choices=("joint", "all"),
        help="store the joint sketch only (rank by A; the rest comes from the shortlisted files) or all three",
    )
    build.add_argument("--private", action="store_true", help="create the index repo private")
    build.add_argument(
        "--force",
        action="store_true",
        help="push into a dataset repo that holds other files than an index (what its load_dataset returns changes)",
    )
    _common(build)
    build.set_defaults(func=run_build)


def _add_update(commands: argparse._SubParsersAction) -> None:
    update = commands.add_parser(
        "update", help="read again the adapters whose commit changed", formatter_class=HelpFormatter
    )
    update.add_argument("index", metavar="ORG/NAME", help="the index to bring up to date")
    update.add_argument(
        "--whole",
        action="store_true",
        help="push the whole index again, not only the rows read as one more shard: load_dataset and the viewer "
        "then show each adapter once (an update does so by itself once the rows replaced pass a tenth of those "
        "stored)",
    )
    _common(update)
    update.set_defaults(func=run_update)


def _add_sign(commands: argparse._SubParsersAction) -> None:
    from fisherhub.cli.support.arguments import add_arguments
    from fisherhub.options import GenerationOptions

    sign = commands.add_parser(
        "sign",
        help="sketch the datasets that unsigned adapters' cards name, add their rows",
        formatter_class=HelpFormatter,
    )
    sign.add_argument("base_model", metavar="BASE_MODEL", help="the base model the datasets are sketched under")
    sign.add_argument("--index", required=True, metavar="ORG/NAME", help="the index (built before) that gets the rows")
    sign.add_argument("--model", default=None, help="where the base model loads from (default: BASE_MODEL)")
    sign.add_argument("--max-documents", type=int, default=None, help="documents sketched per dataset (default: all)")
    sign.add_argument("--text-column", default="text", help="the datasets' text column")
    sign.add_argument("--report", default="sign-report.json", metavar="JSON", help="where the report is written")
    generations = sign.add_argument_group("signing from generations (the adapters whose cards name no readable data)")
    generations.add_argument(
        "--from-generations",
        action="store_true",
        help="then sign every unsigned adapter still without a row from its own samples (a fallback, marked so)",
    )
    add_arguments(generations, GenerationOptions)
    _common(sign, workers=False)
    sign.set_defaults(func=run_sign)


def _add_show(commands: argparse._SubParsersAction) -> None:
    show = commands.add_parser("show", help="what an index holds", formatter_class=HelpFormatter)
    show.add_argument("index", metavar="ORG/NAME", help="the index to show")
    add_token_argument(show)
    show.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="write a heatmap of the alignment A among the rows with the most tokens (up to 24)",
    )
    show.set_defaults(func=run_show)


def _add_space(commands: argparse._SubParsersAction) -> None:
    space = commands.add_parser(
        "space",
        help="the index's browser page: push it as a Space, or serve it here",
        formatter_class=HelpFormatter,
    )
    space.add_argument("index", metavar="ORG/NAME", help="the index the page shows")
    add_space_arguments(space, "spaces/ORG/NAME")
    space.set_defaults(func=run_space)


def run_build(args: argparse.Namespace) -> int:
    from fisherhub.core.features import SKETCHES
    from fisherhub.hub.signature_index.layout import Layout
    from fisherhub.hub.pool import check_workers
    from fisherhub.hub.retry import counting_requests
    from fisherhub.hub.signature_index.build import build_index

    layout = Layout(args.dtype, SKETCHES if args.sketches == "all" else ("joint",))
    with counting_requests() as traffic:
        commit, summary = build_index(
            args.base_model,
            args.push,
            work=args.work,
            layout=layout,
            token=args.token,
            workers=check_workers(args.workers),
            private=args.private,
            progress=True,
            force=args.force,
        )
    print("\n".join(summary.lines()))
    print(traffic.line())
    print(f"pushed {args.push}@{commit}")
    return 0


def run_update(args: argparse.Namespace) -> int:
    from fisherhub.hub.pool import check_workers
    from fisherhub.hub.retry import counting_requests
    from fisherhub.hub.signature_index.update import update_index

    with counting_requests() as traffic:
        commit, summary, read = update_index(
            args.index, work=args.work, token=args.token, workers=check_workers(args.workers), whole=args.whole
        )
    print("\n".join(summary.lines()))
    print(traffic.line())
    print(
        f"read {read} repo(s) (changed, new, or unavailable before); "
        + (f"pushed {args.index}@{commit}" if commit else "the index is up to date")
    )
    return 0


def run_sign(args: argparse.Namespace) -> int:
    from fisherhub.cli.support.arguments import from_namespace
    from fisherhub.cli.support.process_group import run_and_release
    from fisherhub.options import GenerationOptions, check_positive

    check_positive(args, ("max_documents",), optional=True)
    generation = from_namespace(GenerationOptions, args) if args.from_generations else None
    return run_and_release(lambda: _sign(args, generation))


def _sign(args: argparse.Namespace, generation) -> int:
    """Sketch (each process its share of the datasets, then of the adapters to sign from their generations);
    the main process writes the report and pushes."""
    import json

    from accelerate import PartialState

    from fisherhub.lm.loading import load_model_and_tokenizer
    from fisherhub.pipeline.index_signing import sign_unsigned
    from fisherhub.pipeline.processes import no_accelerator

    state = PartialState(cpu=no_accelerator())
    model, tokenizer = load_model_and_tokenizer(args.model or args.base_model)
    if state.num_processes > 1:  # each process on its own device
        model.to(state.device)
    report = sign_unsigned(
        args.base_model,
        args.index,
        model=model,
        tokenizer=tokenizer,
        max_documents=args.max_documents,
        text_column=args.text_column,
        work=args.work,
        token=args.token,
    )
    generated = None
    if generation is not None:
        from fisherhub.generation_signing import sign_from_generations

        state.wait_for_everyone()  # the main process pushed the rows of the card datasets: every process reads them
        generated = sign_from_generations(
            args.base_model,
            args.index,
            model=model,
            tokenizer=tokenizer,
            options=generation,
            work=args.work,
            token=args.token,
        )
    if report is None:  # not the main process: its share is in the work folder, the main one pushed it
        return 0
    written = report.as_dict() if generated is None else {**report.as_dict(), "generations": generated.as_dict()}
    with open(args.report, "w", encoding="utf-8") as handle:
        json.dump(written, handle, indent=1)
    print("\n".join(report.lines() + ([] if generated is None else generated.lines())))
    commit = generated.commit if generated is not None and generated.commit else report.commit
    print(f"wrote {args.report}" + (f"; pushed {args.index}@{commit}" if commit else ""))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from fisherhub.hub.signature_index.card import IndexSummary, superseded_note
    from fisherhub.hub.signature_index.store import load_index

    loaded = load_index(args.index, args.token)
    summary = IndexSummary.of(loaded.table, loaded.base_model, loaded.state["repos"])
    print("\n".join(summary.lines() + summary.neighbour_lines()))
    print(f"index {args.index}@{loaded.commit}, layout {loaded.layout.as_dict()}")
    for line in superseded_note(loaded.table.num_rows, loaded.stored_rows)[:1]:
        print(line)
    if args.plot:
        print(f"wrote {plot_rows(loaded, args.plot)}")
    return 0


def plot_rows(loaded, path: str) -> str:
    """The card's heatmap of A among the rows with the most tokens (``signature_index.rows_figure``), saved."""
    from fisherhub.core.errors import InputError
    from fisherhub.hub.signature_index.card import rows_figure
    from fisherhub.hub.signature_index.rows import read_rows

    where = f"datasets/{loaded.ref.repo_id}"
    figure = rows_figure(read_rows(loaded.table, loaded.base_model, where, loaded.commit), loaded.base_model)
    if figure is None:
        raise InputError(f"{where}: fewer than two usable rows of one sketch id to plot")
    figure.savefig(path, dpi=120)
    return path


def run_space(args: argparse.Namespace) -> int:
    from fisherhub.hub.signature_index import load_index
    from fisherhub.space.publish import index_space_files, space_repo

    if args.push:
        space_repo(args.push)  # a bad name is refused before anything is read
    loaded = load_index(args.index, args.token)  # an index, readable: refused here before a Space is made of it
    files = index_space_files(args.index, loaded.base_model)

    def page():
        from fisherhub.space.index_app import build_index_app

        return build_index_app(args.index, token=args.token)

    return publish_or_serve(args, files, f"the index Space of datasets/{loaded.ref.repo_id}", page, "spaces/ORG/NAME")
