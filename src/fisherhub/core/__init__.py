"""The math core: pure PyTorch, no model, data, Hub or CLI code."""

from fisherhub.core.alignment import AlignmentMatrix, AlignmentResult, alignment, alignment_matrix
from fisherhub.core.signature import Signature
from fisherhub.core.spec import ESTIMATORS, ModelFingerprint, SketchSpec
from fisherhub.core.state import SketchState

__all__ = [
    "ESTIMATORS",
    "AlignmentMatrix",
    "AlignmentResult",
    "ModelFingerprint",
    "Signature",
    "SketchSpec",
    "SketchState",
    "alignment",
    "alignment_matrix",
]
