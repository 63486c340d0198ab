"""Reproductions of the paper's experiments on SmolLM2-135M-Instruct (see benchmarks/RESULTS.md)."""
