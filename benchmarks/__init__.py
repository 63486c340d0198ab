"""The benchmarks and the paper's experiments (``benchmarks/README.md``): ``python -m benchmarks.run --list``."""

import os

# set before torch is imported anywhere: idle OpenMP threads must not spin on the shared cores
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
