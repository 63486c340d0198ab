"""Pick the PEFT LoRA adapter whose training data is closest to a target task, without training or running
any adapter: rank candidates by the Fisher alignment of their signatures with the target's (SPEC §1).

For candidate c and target t (comparable specs) the score is Â(c, t) = ⟨μ̂_c, μ̂_t⟩ / √(⟨μ̂^A_c, μ̂^B_c⟩⟨μ̂^A_t, μ̂^B_t⟩),
with the sketch's standard error; ``score="activation"`` (Ŝ_a) and ``score="error"`` (Ŝ_e) rank by one factor
only, for comparison (S_a cannot tell tasks apart whose activations are alike: SPEC §5).

    selection = select_adapter(["target text", ...], ["org/adapter-a", "org/adapter-b"], base_model="org/base")
    print(selection.table())
    model = selection.load(base_model)          # a PeftModel with the best adapter active

With ``rerank=k`` a second stage loads the first k adapters onto the base model one at a time and re-ranks them by
the target's measured loss (``rerank``).

``candidates`` (where signatures come from), ``target`` (the target's signatures), ``ranking`` (pure: options,
comparability, order), ``rows`` (a ranked or skipped candidate), ``errors``, ``results`` (``Selection``),
``report`` (tables, bar chart), ``peft_loading``, ``rerank``, ``target_losses`` (what the second stage measures),
``nearest`` (the Hub's signatures nearest to a target);
``select`` puts them together. The scoring, verdict and mixing weights are ``fisherhub.analysis``.
"""

from fisherhub.selection.peft_loading import adapter_names
from fisherhub.selection.ranking import SCORE_LABELS, SCORES, check_score
from fisherhub.selection.errors import NoCompatibleCandidatesError
from fisherhub.selection.results import Selection
from fisherhub.selection.rows import AdapterLocation, RankedCandidate, Skipped
from fisherhub.selection.select import select_adapter
from fisherhub.selection.target import SketchOptions

__all__ = [
    "SCORES",
    "SCORE_LABELS",
    "AdapterLocation",
    "NoCompatibleCandidatesError",
    "RankedCandidate",
    "Selection",
    "SketchOptions",
    "Skipped",
    "adapter_names",
    "check_score",
    "select_adapter",
]
