"""The paper author's package (PyPI ``fishersketch`` 0.2.1) on the same captured (a, e) streams.

It lives in a virtual environment of its own, whose interpreter ``FISHERSKETCH_OFFICIAL_PYTHON`` names
(``official_python``), since it shares no code with this library and imports as ``fishersketch``. ``recommend`` writes each task's streams as .npy files (a: (N, d),
e = softmax(W a) − onehot(y): (N, K), float32) and a manifest, runs this file under that interpreter, and
reads back, for every target, the package's ``FisherAtlas.recommend(target, method="auto")``: its ranking
of the other tasks, the regime it read and its confidence. Only the package's public API is called.

    $FISHERSKETCH_OFFICIAL_PYTHON benchmarks/paper/official.py MANIFEST.json RESULT.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: the environment variable naming the interpreter of a virtual environment with ``pip install fishersketch==0.2.1``
OFFICIAL_PYTHON_VARIABLE = "FISHERSKETCH_OFFICIAL_PYTHON"
#: the package's own settings beside ours: m = 4096, seed 0; its default shrinkage
SKETCH_DIM, SEED = 4096, 0
CHUNK = 256


def official_python(required: bool = True) -> Path | None:
    """The official package's interpreter (``OFFICIAL_PYTHON_VARIABLE``); None where it is unset and not
    ``required``. Exits with a message where it is required and unset, or set to a missing file."""
    value = os.environ.get(OFFICIAL_PYTHON_VARIABLE)
    if not value:
        if not required:
            return None
        raise SystemExit(
            f"set {OFFICIAL_PYTHON_VARIABLE} to the python of a virtual environment with "
            "`pip install fishersketch==0.2.1`, or pass --no-official to leave the package out"
        )
    if not Path(value).is_file():
        raise SystemExit(
            f"{OFFICIAL_PYTHON_VARIABLE}={value}: no such file (the python of a virtual environment "
            "with fishersketch 0.2.1)"
        )
    return Path(value)


def recommend(names, activation_paths, error_paths, result_path: Path) -> dict:
    """Run the package on the tasks' saved streams (cached in ``result_path``); target → its recommendation."""
    if result_path.exists():
        return json.loads(result_path.read_text())
    manifest = result_path.with_suffix(".manifest.json")
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(
        json.dumps(
            {
                "names": list(names),
                "activations": [str(p) for p in activation_paths],
                "errors": [str(p) for p in error_paths],
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(official_python()), __file__, str(manifest), str(result_path)], check=True, env=env)
    return json.loads(result_path.read_text())


def score_matrix(names, recommendations: dict):
    """[source, target] = the package's score of source for target (its auto method's column); 0 on the diagonal."""
    import torch

    index = {name: i for i, name in enumerate(names)}
    scores = torch.zeros(len(names), len(names), dtype=torch.float64)
    for target, rec in recommendations["targets"].items():
        for entry in rec["ranked"]:
            scores[index[entry["name"]], index[target]] = entry["score"]
    return scores


def _run(manifest_path: str, result_path: str) -> None:
    import numpy as np
    from fishersketch import FisherAtlas

    manifest = json.loads(Path(manifest_path).read_text())
    started = time.time()
    atlas = None
    for name, a_path, e_path in zip(manifest["names"], manifest["activations"], manifest["errors"]):
        activations, errors = np.load(a_path, mmap_mode="r"), np.load(e_path, mmap_mode="r")
        if atlas is None:
            atlas = FisherAtlas(dim_a=activations.shape[1], dim_e=errors.shape[1], sketch_dim=SKETCH_DIM, seed=SEED)
        for start in range(0, len(activations), CHUNK):
            atlas.add_task(
                name,
                np.asarray(activations[start : start + CHUNK], dtype=np.float32),
                np.asarray(errors[start : start + CHUNK], dtype=np.float32),
            )
    sketched = time.time()
    targets = {}
    for target in manifest["names"]:
        rec = atlas.recommend(target, method="auto")
        regime = rec.regime
        targets[target] = {
            "method": rec.method,
            "confidence": rec.confidence,
            "worth_it": bool(rec.worth_it),
            "gap_1v2": float(rec.gap_1v2),
            "margin_vs_random": float(rec.margin_vs_random),
            "best": rec.best.name,
            "regime": None if regime is None else regime.regime,
            "regime_method": None if regime is None else regime.recommended_method,
            "ranked": [{"name": s.name, "score": float(s.score), "rank": int(s.rank)} for s in rec.ranked],
        }
    Path(result_path).write_text(
        json.dumps(
            {
                "package": "fishersketch",
                "sketch_dim": SKETCH_DIM,
                "seed": SEED,
                "targets": targets,
                "seconds": {"sketch": sketched - started, "recommend": time.time() - sketched},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    _run(*sys.argv[1:3])
