"""The math core: pure PyTorch, no model, data, Hub or CLI code."""

from fishersketch.core.alignment import AlignmentMatrix, AlignmentResult, alignment, alignment_matrix
from fishersketch.core.signature import Signature
from fishersketch.core.spec import ESTIMATORS, ModelFingerprint, SketchSpec
from fishersketch.core.state import SketchState

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
