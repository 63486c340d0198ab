"""``fisherhub sketch``: the signature of a dataset under a base model (also ``scripts/sketch.py``): of its
output head, or with ``--modules all-linear|q_proj,v_proj`` / ``--adapter DIR`` of a set of linear modules
(a network signature, docs/SPEC.md §2b).

One process: ``fisherhub sketch --dataset DATA --output sig.safetensors``. N processes:
``accelerate launch [launch options] -m fisherhub sketch --dataset DATA ...`` (or ``scripts/sketch.py``
in a checkout; see docs/distributed.md): on N GPUs ``--num_processes N``; on the CPU ``--multi_gpu
--num_processes N --num_machines 1 --mixed_precision no --dynamo_backend no --main_process_port 0`` and
``sketch --cpu`` (without ``--multi_gpu`` accelerate starts one process there; the run then warns, naming both
numbers). ``python -m fisherhub.cli.commands.sketch`` runs it too.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from pathlib import Path

from fisherhub.cli.support.outputs import OVERWRITE_HELP, check_outputs
from fisherhub.core.errors import InputError
from fisherhub.cli.support.arguments import HelpFormatter, add_arguments, from_namespace
from fisherhub.hub.repo_types import DEFAULT_REPO_TYPE, PUSH_REPO_TYPES
from fisherhub.options import DataOptions, ModelOptions, RunOptions, SketchJobOptions, SpecOptions, documented, option


@documented
@dataclasses.dataclass(kw_only=True)
class SketchCommandOptions(SketchJobOptions):
    """``fisherhub sketch``: a sketch run, and where the command puts its signature."""

    output: str | None = option("signature.safetensors", "where the signature is written", flags=("-o", "--output"))
    push_to_hub: str | None = option(None, "also push the signature to this Hub repo", metavar="REPO")
    push_repo_type: str = option(
        DEFAULT_REPO_TYPE,
        "type of a bare org/name given to --push-to-hub (datasets/org/name names a dataset repo)",
        choices=PUSH_REPO_TYPES,
        flags=("--repo-type",),
    )


#: argument groups of ``fisherhub sketch``, in --help order: (title, options dataclass)
GROUPS = (("data", DataOptions), ("model", ModelOptions), ("sketch", SpecOptions), ("run", RunOptions))

#: exit status after Ctrl-C (128 + SIGINT, as shells report it)
INTERRUPTED_EXIT_CODE = 130


def add_sketch_arguments(parser: argparse.ArgumentParser) -> None:
    for title, options in GROUPS:
        add_arguments(parser.add_argument_group(title), options)
    inherited = tuple(field.name for _, options in GROUPS for field in dataclasses.fields(options))
    output = parser.add_argument_group("output")
    add_arguments(output, SketchCommandOptions, exclude=inherited)
    output.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)


def sketch_args(namespace: argparse.Namespace) -> SketchCommandOptions:
    """The run the flags describe; bad values, a missing data file and an output that cannot be written are
    refused here, before anything heavy (``pipeline.loop.sketch`` then checks the checkpoint folder)."""
    from fisherhub.data.files import missing_data_file

    args = from_namespace(SketchCommandOptions, namespace, data=from_namespace(DataOptions, namespace))
    if (missing := missing_data_file(args.data.dataset)) is not None:
        raise InputError(f"--dataset {missing!r}: no such data file (from {os.getcwd()}); check the path")
    check_outputs([("--output", args.output)], namespace.overwrite)
    return args


def run(namespace: argparse.Namespace) -> int:
    args = sketch_args(namespace)  # bad options and a missing data file are refused before anything heavy loads
    from fisherhub.cli.support.allocator import keep_freed_memory
    from fisherhub.cli.support.process_group import run_and_release

    keep_freed_memory()
    return run_and_release(lambda: _sketch_and_write(args, namespace))


def _sketch_and_write(args: SketchCommandOptions, namespace: argparse.Namespace) -> int:
    """Sketch, then (main process) write and push; the checkpoints go once every process has finished."""
    from accelerate import PartialState

    from fisherhub.pipeline.checkpoints import remove_checkpoints, remove_if_empty
    from fisherhub.pipeline.loop import sketch

    try:
        signature = sketch(args)
    except KeyboardInterrupt:
        if _is_main_process():
            print(f"\ninterrupted: {_how_to_resume(namespace)}", file=sys.stderr)
        return INTERRUPTED_EXIT_CODE
    state = PartialState()
    if state.is_main_process:
        if args.output:
            _save(signature, args.output, args)
            print(
                f"wrote {args.output}: sketch id {signature.sketch_id}, {signature.num_documents} documents, "
                f"{signature.num_tokens} scored tokens"
            )
        if args.push_to_hub:
            from fisherhub.hub import push_signature

            from fisherhub.cli.commands.push import replacements

            result = push_signature(signature, args.push_to_hub, repo_type=args.push_repo_type, create_repo=True)
            print(f"pushed: {result.ref or result.location}", *replacements(result), sep="\n")
    if args.checkpoint and not args.keep_checkpoint:  # the result is safe: the checkpoints have served
        state.wait_for_everyone()
        remove_checkpoints(args.checkpoint, state.process_index, state.num_processes)
        state.wait_for_everyone()
        if state.is_main_process:
            remove_if_empty(args.checkpoint)
    return 0


def _save(signature, output: str, args: SketchCommandOptions) -> None:
    """Write ``output``; when it cannot be written (a full disk), say so in one line and what was kept."""
    try:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        signature.save(output)
    except (OSError, InputError) as exc:
        kept = (
            f"the checkpoint in {args.checkpoint} is kept: free some space, then rerun with --resume to write it"
            if args.checkpoint
            else "rerun with --checkpoint DIR to keep the work of a run whose output fails"
        )
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise InputError(f"the signature was sketched but not written ({reason}); {kept}") from exc


def _command_line(namespace: argparse.Namespace) -> list[str]:
    """The options of ``namespace`` that differ from their defaults, as command-line words."""
    parser = argparse.ArgumentParser()
    add_sketch_arguments(parser)
    words = []
    for action in parser._actions:
        value = getattr(namespace, action.dest, action.default)
        if not action.option_strings or value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if isinstance(action, argparse.BooleanOptionalAction):  # option_strings: --name, --no-name
            words.append(action.option_strings[0 if value else 1])
        elif action.nargs == 0:  # store_true / store_false
            words.append(flag)
        elif isinstance(action, argparse._AppendAction):  # --adapter A --adapter B
            words += [word for item in value for word in (flag, str(item))]
        else:
            words += [flag, str(value)]
    return words


def _how_to_resume(namespace: argparse.Namespace) -> str:
    """One line: the command that continues from the last checkpoint, or how to make the next run resumable."""
    from fisherhub.pipeline.checkpoints import has_checkpoint

    words = [word for word in _command_line(namespace) if word != "--resume"]
    launcher = (
        "accelerate launch [your launch options] -m fisherhub sketch" if _num_processes() > 1 else "fisherhub sketch"
    )
    if namespace.checkpoint and has_checkpoint(namespace.checkpoint):
        return (
            f"continue from the last checkpoint in {namespace.checkpoint} with: {launcher} {shlex.join(words)} --resume"
        )
    if namespace.checkpoint:
        return (
            f"no checkpoint was written to {namespace.checkpoint} yet (one every --checkpoint-every batches); start "
            f"again with: {launcher} {shlex.join(words)}"
        )
    return (
        f"no --checkpoint was given, so nothing was kept; to make a run resumable: {launcher} {shlex.join(words)} "
        "--checkpoint DIR (then add --resume after an interruption)"
    )


def _num_processes() -> int:
    from accelerate import PartialState

    return PartialState().num_processes


def _is_main_process() -> bool:
    from accelerate import PartialState

    return PartialState().is_main_process


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sketch",
        help="sketch a dataset under a base model into a signature file",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    add_sketch_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    from fisherhub.cli import run_command

    parser = argparse.ArgumentParser(prog="sketch.py", description=__doc__, formatter_class=HelpFormatter)
    add_sketch_arguments(parser)
    parser.set_defaults(func=run)
    return run_command(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
