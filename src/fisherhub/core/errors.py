"""Exception types. Every error the library raises on bad input is a ``FisherHubError`` (not a ``ValueError``,
so generic handlers of library or Python errors never catch it by accident)."""

from __future__ import annotations


class FisherHubError(Exception):
    """Base class: bad input or an invalid operation, with a message that says what to do."""


class InputError(FisherHubError):
    """Tensors or arguments that cannot be sketched (shape, dtype, NaN/inf, empty)."""


class IncompatibleSignaturesError(FisherHubError):
    """Two signatures (or states) made with different sketch specs were compared or merged.

    Args:
        differences (`dict[str, tuple[object, object]]`):
            Spec field -> (one value, the other).
        what (`str`, *optional*):
            What was compared, for the message.
    """

    def __init__(self, differences: dict[str, tuple[object, object]], what: str = "signatures"):
        self.differences = differences
        fields = "; ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in differences.items())
        super().__init__(
            f"cannot compare {what} with different sketch ids; differing fields: {fields}. "
            "Sketch both with the same spec (e.g. `like=` the other signature)."
        )


class SignatureFileError(FisherHubError):
    """A signature or state file that is truncated, edited, or of an unknown format version."""


class TooFewDocumentsError(FisherHubError):
    """The split-sample norm is not positive: the task has too few documents for an unbiased norm."""


class TooFewDocumentsWarning(UserWarning):
    """A signature finalized from fewer documents than make it trustworthy (``core.state.MIN_DOCUMENTS``), or
    whose split-sample norm is not resolved; the message says how many documents to sketch."""


class ImplausibleAlignmentWarning(UserWarning):
    """An alignment whose numbers the math does not allow (``AlignmentResult.doubt`` says why and which check):
    a forged or damaged signature, or estimates outside [0, 1] by more than their error bars."""
