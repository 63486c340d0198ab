"""The math core: pure PyTorch, no model, data, Hub or CLI code."""

from fisherhub.core.alignment import AlignmentMatrix, AlignmentResult, alignment, alignment_matrix
from fisherhub.core.batch import HeadBatch
from fisherhub.core.signature import Signature
from fisherhub.core.spec import ESTIMATORS, ModelFingerprint, SketchSpec
from fisherhub.core.state import SketchState

__all__ = [
    "ESTIMATORS",
    "AlignmentMatrix",
    "AlignmentResult",
    "HeadBatch",
    "ModelFingerprint",
    "Signature",
    "SketchSpec",
    "SketchState",
    "alignment",
    "alignment_matrix",
]
