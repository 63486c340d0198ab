"""What tests and benchmarks share: tiny random models, exact oracles and a local Hub server (no downloads).

- ``fisherhub.testing.tiny_models``: tiny random causal LMs of several families and a character tokenizer;
- ``fisherhub.testing.oracles``: small synthetic (a, e) tasks from a shared softmax head, and their sketch;
- ``fisherhub.testing.hub_server``: an in-process stand-in for the Hub's HTTP API (standard library + yaml);
- ``fisherhub.testing.hub_repos``: adapter and dataset repos put on it through the real client;
- ``fisherhub.testing.plausibility``: every signature and pair made while it watches, through the bounded-claims
  checks (the test session's and ``scripts/plausibility_sweep.py``'s count of false alarms).

Nothing here is imported by the library itself; each module imports only what it needs, on import.
"""
