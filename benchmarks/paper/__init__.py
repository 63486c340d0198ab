"""Reproductions of the paper's experiments on SmolLM2-135M-Instruct (see benchmarks/RESULTS.md)."""

import os

# set before torch is imported anywhere: idle OpenMP threads must not spin on the shared cores
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
