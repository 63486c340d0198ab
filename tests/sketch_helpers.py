"""Running the sketcher in tests: its arguments for a folder (``model/`` and ``docs.jsonl``), the same run as
``scripts/sketch.py`` in a subprocess (plain, or 2 CPU processes under ``accelerate launch``), one thread."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import torch

from fisherhub.cli.commands.sketch import SketchCommandOptions
from fisherhub.options import DataOptions
from fisherhub.pipeline.loop import sketch as sketch_run

REPO = Path(__file__).resolve().parents[1]
LAUNCH_TWO_CPU_PROCESSES = [
    "-m",
    "accelerate.commands.launch",
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
    "--main_process_port",
    "0",
]


@contextlib.contextmanager
def single_thread():
    """Per-token float32 results depend on the BLAS thread count; subprocesses run with OMP_NUM_THREADS=1."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def run_args(folder: Path, name: str, **overrides) -> SketchCommandOptions:
    """``folder/docs.jsonl`` under ``folder/model``, m = 256, one document a batch, a checkpoint every 2."""
    options = {
        "data": DataOptions(str(folder / "docs.jsonl")),
        "model": str(folder / "model"),
        "m": 256,
        "batch_size": 1,
        "output": str(folder / f"{name}.safetensors"),
        "checkpoint": str(folder / f"{name}-checkpoint"),
        "checkpoint_every": 2,
        "keep_checkpoint": True,
        "progress": False,
        "cpu": True,  # tests read the checkpoints
    }
    return SketchCommandOptions(**{**options, **overrides})


def sketch(args: SketchCommandOptions):
    """``pipeline.loop.sketch`` and the write of ``args.output`` that ``fisherhub sketch`` does after it."""
    signature = sketch_run(args)
    signature.save(args.output)
    return signature


def cli_options(args: SketchCommandOptions) -> list[str]:
    """The command-line options of ``args`` (those ``run_args`` sets, and the network modules and granularity)."""
    modules = args.modules if args.modules is None or isinstance(args.modules, str) else ",".join(args.modules)
    return [
        *(["--modules", modules, "--granularity", args.granularity] if modules else []),
        "--dataset",
        args.data.dataset,
        *(["--streaming"] if args.data.streaming else []),
        "--model",
        args.model,
        "-m",
        str(args.m),
        "--batch-size",
        str(args.batch_size),
        "--output",
        args.output,
        "--checkpoint",
        args.checkpoint,
        "--checkpoint-every",
        str(args.checkpoint_every),
        "--keep-checkpoint",
        "--no-progress",
        "--cpu",
    ]


def run_script(
    prefix: list[str], args: SketchCommandOptions, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    command = [sys.executable, *prefix, str(REPO / "scripts" / "sketch.py"), *cli_options(args)]
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
