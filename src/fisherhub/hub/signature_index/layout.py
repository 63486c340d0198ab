"""How a signature index row stores its sketches (``hub/signature_index``); no torch or numpy here, so the
CLI's parsers can read the choices."""

from __future__ import annotations

import dataclasses
from typing import Any

from fisherhub.core.errors import InputError

#: float types a row may store its sketches in (as unit vectors μ̂/‖μ̂‖)
INDEX_DTYPES = ("float16", "float32")
DEFAULT_DTYPE = "float16"
DEFAULT_SKETCHES = ("joint",)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Which sketches a row stores (``joint`` always), and in which float type."""

    dtype: str = DEFAULT_DTYPE
    sketches: tuple[str, ...] = DEFAULT_SKETCHES

    def __post_init__(self):
        from fisherhub.core.features import SKETCHES

        if self.dtype not in INDEX_DTYPES:
            raise InputError(f"index dtype must be one of {INDEX_DTYPES}, got {self.dtype!r}")
        if "joint" not in self.sketches or not set(self.sketches) <= set(SKETCHES):
            raise InputError(f"index sketches must include 'joint' and be among {SKETCHES}, got {self.sketches!r}")
        object.__setattr__(self, "sketches", tuple(s for s in SKETCHES if s in self.sketches))

    def as_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "sketches": list(self.sketches)}
