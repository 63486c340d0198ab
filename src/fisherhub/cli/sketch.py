"""``fisherhub sketch``: the signature of a dataset under a base model (also ``scripts/sketch.py``).

One process: ``fisherhub sketch --dataset DATA --output sig.safetensors``. N processes:
``accelerate launch [launch options] scripts/sketch.py --dataset DATA ...`` (see docs/distributed.md).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from fisherhub.options import (
    DataArgs, HelpFormatter, ModelOptions, RunOptions, SketchArgs, SpecOptions, add_arguments, from_namespace,
)

#: argument groups of ``fisherhub sketch``, in --help order: (title, options dataclass)
GROUPS = (("data", DataArgs), ("model", ModelOptions), ("sketch", SpecOptions), ("run", RunOptions))


def add_sketch_arguments(parser: argparse.ArgumentParser) -> None:
    for title, options in GROUPS:
        add_arguments(parser.add_argument_group(title), options)
    inherited = tuple(field.name for _, options in GROUPS for field in dataclasses.fields(options))
    add_arguments(parser.add_argument_group("output"), SketchArgs, exclude=inherited)


def sketch_args(namespace: argparse.Namespace) -> SketchArgs:
    return from_namespace(SketchArgs, namespace, data=from_namespace(DataArgs, namespace))


def run(namespace: argparse.Namespace) -> int:
    from fisherhub.cli.allocator import keep_freed_memory
    from fisherhub.pipeline.sketch import sketch

    args = sketch_args(namespace)  # bad options are refused before anything heavy is imported or loaded
    keep_freed_memory()
    signature = sketch(args)
    if _is_main_process():
        if args.output:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            signature.save(args.output)
            print(
                f"wrote {args.output}: sketch id {signature.sketch_id}, {signature.num_documents} documents, "
                f"{signature.num_tokens} scored tokens"
            )
        if args.push_to_hub:
            from fisherhub.hub import push_signature

            result = push_signature(signature, args.push_to_hub, repo_type=args.push_repo_type, create_repo=True)
            print(f"pushed: {result.ref}")
    return 0


def _is_main_process() -> bool:
    from accelerate import PartialState

    return PartialState().is_main_process


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sketch", help="sketch a dataset under a base model into a signature file",
        description=__doc__, formatter_class=HelpFormatter,
    )
    add_sketch_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    from fisherhub.cli import run_command

    parser = argparse.ArgumentParser(prog="sketch.py", description=__doc__, formatter_class=HelpFormatter)
    add_sketch_arguments(parser)
    parser.set_defaults(func=run)
    return run_command(parser, argv)
