"""Analysis of alignments: pure functions over ``AlignmentResult``s of candidates with one target, importing
only ``fisherhub.core``. Each geometry's fields, null and significance rule come from ``core.geometry``.

- ``scores``: one geometry's scores of the candidates with their standard errors (``Scores``).
- ``separation``: whether a geometry tells the candidates apart (Cochran's heterogeneity and the largest
  score against the Bonferroni z for the maximum of n).
- ``regime``: which head geometry carries the signal (coupled, separable, activation-dark, error-flat,
  no-signal).
- ``shrinkage``: ρ shrunk by empirical Bayes over the candidates, and A = S_a S_e ρ̃.
- ``auto``: what ``score="auto"`` scores by.
- ``verdict``: how far to trust one selection, and ``score_selection`` that puts the above together.
- ``mixing``: mixing weights of the candidates significantly aligned with the target.
- ``nearest``: the signatures most aligned with a target among many.
- ``halving``: the budgeted second stage's schedule, successive halving of a shortlist over a loss oracle.

Standard errors of different candidates are treated as independent; they share the target's sketch, so the
tests are approximate and a little conservative for differences.
"""
