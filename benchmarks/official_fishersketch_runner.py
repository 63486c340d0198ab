"""Runs the paper author's package (PyPI ``fishersketch`` 0.2.1, a separate implementation) on captured
(a, e) streams, for ``estimator_accuracy.py --structured``. Run with that package's interpreter:

    $FISHERSKETCH_OFFICIAL_PYTHON benchmarks/official_fishersketch_runner.py STREAMS.npz OUT.json SEED...

STREAMS.npz holds ``a_k``, ``e_k``, ``half_k`` (document index mod 2) per task k and ``m``. Writes, per seed,
the normalized A (its shrunk estimator ``fisher_shrunk``) and S_e as nested lists.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from fishersketch import FisherSketchGPU


def normalized(matrix: np.ndarray) -> np.ndarray:
    diagonal = np.sqrt(np.clip(np.diag(matrix), 1e-300, None))
    return matrix / np.outer(diagonal, diagonal)


def main(streams_path: str, out_path: str, *seeds: str) -> None:
    streams = np.load(streams_path)
    tasks = sorted({int(key.split("_")[1]) for key in streams.files if key.startswith("a_")})
    d, vocab_size, m = streams["a_0"].shape[1], streams["e_0"].shape[1], int(streams["m"])
    results = {}
    for seed in map(int, seeds):
        sketcher = FisherSketchGPU(
            dim_a=d, dim_e=vocab_size, sketch_dim=m, device="cpu", seed=seed, sketch_method="srht"
        )
        for k in tasks:
            splits = np.where(streams[f"half_{k}"] == 0, "A", "B")
            sketcher.update_batch(k, torch.from_numpy(streams[f"a_{k}"]), torch.from_numpy(streams[f"e_{k}"]), splits)
        out = sketcher.compute_all_with_shrinkage()
        results[seed] = {
            "fisher": out["fisher_shrunk"].tolist(),
            "error": normalized(out["S_e"]).tolist(),
            "fisher_unshrunk": normalized(out["S_ae"]).tolist(),
        }
    with open(out_path, "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main(*sys.argv[1:])
