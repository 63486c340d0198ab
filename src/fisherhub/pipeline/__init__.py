"""Sketching runs: the loop over a dataset's batches (one process or many under accelerate) and its checkpoints,
for head and network signatures alike."""

from fisherhub.pipeline.loop import (
    sketch,
    sketch_dataset,
    sketch_network_kernels,
    sketch_texts,
)

__all__ = ["sketch", "sketch_dataset", "sketch_network_kernels", "sketch_texts"]
