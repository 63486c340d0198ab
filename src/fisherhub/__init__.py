"""fisherhub: head Fisher alignment at vocabulary scale.

Stream a dataset once through a causal LM, keep a 16 KiB random-feature signature of its per-token
head gradients, and compare signatures: their cosine estimates the Fisher alignment of the tasks.
"""

from fisherhub.core import (
    AlignmentMatrix,
    AlignmentResult,
    HeadBatch,
    ModelFingerprint,
    Signature,
    SketchSpec,
    SketchState,
    alignment,
    alignment_matrix,
)
from fisherhub.core.signature import library_version
from fisherhub.metric import install_metric, metric_path
from fisherhub.core.errors import (
    FisherHubError,
    IncompatibleSignaturesError,
    InputError,
    SignatureFileError,
    TooFewDocumentsError,
)

__version__ = library_version()

__all__ = [
    "AlignmentMatrix",
    "AlignmentResult",
    "HeadBatch",
    "FisherHubError",
    "IncompatibleSignaturesError",
    "InputError",
    "ModelFingerprint",
    "Signature",
    "SignatureFileError",
    "SketchSpec",
    "SketchState",
    "TooFewDocumentsError",
    "__version__",
    "alignment",
    "alignment_matrix",
    "install_metric",
    "metric_path",
]
