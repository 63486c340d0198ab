"""The names and defaults of a sketch's options (SPEC §2–3), without torch: the CLI builds its arguments
from them before anything heavy is imported. ``check_choice`` is the one check of a choice among them."""

import re

from fisherhub.core.errors import InputError

#: estimator name -> (activation-side projector, vocabulary-side projector), see core.projectors.
ESTIMATORS = {
    "maclaurin-srht": ("dense-sign", "srht"),
    "maclaurin-folded": ("dense-sign", "folded"),
    "maclaurin-hadamard": ("block-srht", "folded-slice-signs"),
    "maclaurin-hadamard-permuted": ("block-srht", "folded-chunk-permuted"),
}
DEFAULT_ESTIMATOR = "maclaurin-hadamard-permuted"
#: the default until issue 14 (its shared slice signs bias S_e of tasks whose labels lie a fold width apart);
#: its signatures still load and compare with each other, and the benchmarks time it beside the default.
PREVIOUS_DEFAULT_ESTIMATOR = "maclaurin-hadamard"
#: the three sketches of a task (joint (a, e) features, activation-only, error-only): the tensors of a signature
#: and the order of the state's sums, features and split norms.
SKETCHES = ("joint", "activation", "error")
GRANULARITIES = ("token", "sequence")
FISHER_TYPES = ("empirical", "true")
#: what the error side of a head sketch is: e = ∂ℓ/∂z (K numbers), or δ = Wᵀe = ∂ℓ/∂a (d numbers).
ERROR_SPACES = ("logits", "head-input")
#: network sketches (SPEC §2b): the full kernel (g·g')² of the concatenated gradient, or the block-diagonal
#: Σ_l (g_l·g'_l)².
KERNELS = ("full", "block")
#: the module set of every linear module but the output head (PEFT's ``target_modules="all-linear"``).
ALL_LINEAR = "all-linear"
#: random features per sketch: the joint signature is m float32 = 16 KiB at the default.
DEFAULT_M = 4096
DEFAULT_SEED = 0
#: below this many documents an unresolved split-sample norm is refused (``TooFewDocumentsError``): the
#: split-half estimate's own sampling noise, which its standard error does not see, dominates there.
MIN_DOCUMENTS = 20
#: the budgeted second stage of ``select_adapter`` (``rerank="halving"``, ``analysis.halving``): its name, its
#: default budget in full passes over the target's documents (the base model's included: 4 costs what
#: ``rerank=3`` costs) and the most first-stage candidates it shortlists
HALVING = "halving"
DEFAULT_RERANK_BUDGET = 4
HALVING_SHORTLIST = 32
#: recall@k (k = 1 … ``HALVING_SHORTLIST``) of that pool, the chance that the best candidate is among its first k:
#: the mean over the measured suites with more than k candidates (exp. 3–7, 5–11 candidates per target; the wide
#: suite, 128), made non-decreasing by pooling adjacent violators (``benchmarks/RESULTS.md``, "P(best) of all
#: candidates"). With far more candidates than 128 the true recall at the same k is lower.
FIRST_STAGE_RECALL = (0.24, 0.47, 0.65, 0.73, 0.73, *(0.8,) * 10, *(0.92,) * 15, 1.0, 1.0)

#: the ``source`` in the metadata of a signature sketched from samples of the adapter itself (SPEC §3b), also how
#: its index row was obtained
GENERATED_SOURCE = "generated"
#: a Hub repo id, as signatures record their base model and dataset: ``org/name``
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
#: a full commit id, as signatures record revisions: 40 hex digits
COMMIT_ID = re.compile(r"[0-9a-f]{40}")

#: the options that are a choice among names, and the names (``SketchSpec`` and ``options.SpecOptions`` check them)
CHOICES = {
    "estimator": tuple(sorted(ESTIMATORS)),
    "granularity": GRANULARITIES,
    "fisher": FISHER_TYPES,
    "error_space": ERROR_SPACES,
    "kernel": KERNELS,
}


def check_choice(name: str, value: object, label: str) -> None:
    """Refuse ``value`` for the option ``name`` unless it is one of ``CHOICES[name]``; ``label`` names the option
    as the user gave it (``--kernel``, ``SketchSpec.kernel``)."""
    if value not in CHOICES[name]:
        raise InputError(f"{label} must be one of {', '.join(CHOICES[name])}, got {value!r}")
