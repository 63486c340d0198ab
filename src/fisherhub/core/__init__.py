"""The math core: pure PyTorch, no model, data, Hub or CLI code. Names are imported on first use, so
``fisherhub.core.errors`` and ``fisherhub.core.registry`` load without torch."""

import importlib
from collections.abc import Callable


def lazy_attributes(package: str, exports: dict[str, str], *, cache: bool = True) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` (PEP 562) for a package whose names (name -> module) are imported on
    first use; ``cache``: keep each in the package's namespace once imported."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        if cache:
            namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


_EXPORTS = {
    "AlignmentMatrix": "fisherhub.core.alignment",
    "AlignmentResult": "fisherhub.core.alignment",
    "alignment": "fisherhub.core.alignment",
    "alignment_matrix": "fisherhub.core.alignment",
    "HeadBatch": "fisherhub.core.batch",
    "Signature": "fisherhub.core.signature",
    "ModelFingerprint": "fisherhub.core.spec",
    "SketchSpec": "fisherhub.core.spec",
    "SketchState": "fisherhub.core.state",
    "ESTIMATORS": "fisherhub.core.registry",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
