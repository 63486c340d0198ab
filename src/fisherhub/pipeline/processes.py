"""What the processes of one sketch run share through ``accelerate``: the accelerator, the main process's pilot
direction, the sizes of every shard, and the one all-reduce of the sums and counts at the end."""

from __future__ import annotations

import os

import torch

from fisherhub.core.spec import SketchSpec
from fisherhub.core.state import SketchState
from fisherhub.data.stream import DocumentStream
from fisherhub.data.stream import DocumentCounts


def no_accelerator() -> bool:
    """True when ``ACCELERATE_USE_CPU`` says so or no accelerator device is available (accelerate's state
    must then be made with ``cpu=True`` to see the processes ``accelerate launch`` started)."""
    return (
        os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes") or not torch.accelerator.is_available()
    )


def make_accelerator(cpu: bool | None = None):
    """An ``Accelerator``; ``cpu=None`` uses the CPU when no accelerator device is available."""
    from accelerate import Accelerator

    from fisherhub.pipeline.launch import warn_if_fewer_processes

    accelerator = Accelerator(cpu=no_accelerator() if cpu is None else cpu)
    warn_if_fewer_processes(accelerator.num_processes)  # a launch that asked for more says so
    return accelerator


def reduce_totals(accelerator, state: SketchState, counts: DocumentCounts) -> DocumentCounts:
    """One all-reduce (sum) of the state's sums and counts and the document counts; updates ``state``.

    Everything travels as one float64 vector (counts are exact below 2⁵³).
    """
    packed = torch.cat(
        [
            state.sums.flatten(),
            state.token_counts.double(),
            state.document_counts.double(),
            torch.tensor([counts.seen, counts.too_short], dtype=torch.float64, device=state.sums.device),
        ]
    )
    total = accelerator.reduce(packed, reduction="sum")
    size = state.sums.numel()
    state.sums.copy_(total[:size].view_as(state.sums))
    state.token_counts.copy_(total[size : size + 2].round().long())
    state.document_counts.copy_(total[size + 2 : size + 4].round().long())
    seen, too_short = total[size + 4 :].round().long().tolist()
    return DocumentCounts(seen=seen, too_short=too_short)


def main_process_reflection(accelerator, spec: SketchSpec) -> SketchSpec:
    """Every process sketches with the main process's pilot mean (each device computes its own, which
    may differ in the last bits; the sums of one signature must come from one set of projections)."""
    reflection = spec.reflection_tensor
    if accelerator.num_processes == 1 or reflection is None:
        return spec
    from accelerate.utils import broadcast

    pilot = broadcast(reflection.to(accelerator.device), from_process=0)
    return spec.with_reflection(pilot.cpu())


def all_shard_sizes(accelerator, stream: DocumentStream, own_sizes: list[int]) -> list[int]:
    """The rows of every shard of the stream, from each process's own (one all-gather)."""
    from accelerate.utils import gather_object

    sizes = [0] * stream.source.num_shards
    for shard, size in gather_object(list(zip(stream.own_shards(), own_sizes))):
        sizes[shard] = size
    return sizes
