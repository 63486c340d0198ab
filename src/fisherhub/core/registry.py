"""The names and defaults of a sketch's options (SPEC §2–3), without torch: the CLI builds its arguments
from them before anything heavy is imported."""

#: estimator name -> (activation-side projector, vocabulary-side projector), see core.projectors.
ESTIMATORS = {
    "maclaurin-srht": ("dense-sign", "srht"),
    "maclaurin-folded": ("dense-sign", "folded"),
    "maclaurin-hadamard": ("block-srht", "folded-slice-signs"),
}
DEFAULT_ESTIMATOR = "maclaurin-hadamard"
GRANULARITIES = ("token", "sequence")
FISHER_TYPES = ("empirical", "true")
#: random features per sketch: the joint signature is m float32 = 16 KiB at the default.
DEFAULT_M = 4096
DEFAULT_SEED = 0
