"""Exception types. Every error the library raises on bad input is a ``FisherHubError`` (not a ``ValueError``,
so generic handlers of library or Python errors never catch it by accident)."""

from __future__ import annotations


class FisherHubError(Exception):
    """Base class: bad input or an invalid operation, with a message that says what to do."""


class InputError(FisherHubError):
    """Tensors or arguments that cannot be sketched (shape, dtype, NaN/inf, empty)."""


#: the spec fields that come from the base model: signatures of two models differ in some of them
MODEL_FIELDS = ("d", "vocab_size", "head_checksum", "tokenizer_checksum")


class IncompatibleSignaturesError(FisherHubError):
    """Two signatures (or states) made with different sketch specs were compared or merged. The message names the
    differing fields and the way out: another base model cannot be sketched ``like=`` the other signature (sketch
    both under one model); any other spec can.

    Args:
        differences (`dict[str, tuple[object, object]]`):
            Spec field -> (one value, the other).
        what (`str`, *optional*):
            What was compared, for the message.
        base_models (`tuple[str | None, str | None]`, *optional*):
            The base models the two signatures name, for the message.
    """

    def __init__(
        self,
        differences: dict[str, tuple[object, object]],
        what: str = "signatures",
        base_models: tuple[str | None, str | None] | None = None,
    ):
        self.differences = differences
        fields = "; ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in differences.items())
        if set(MODEL_FIELDS) & set(differences):
            first, second = base_models or (None, None)
            named = f" ({first!r} and {second!r})" if first and second and first != second else ""
            hint = (
                f"They were sketched under different base models{named}, and signatures compare only under one "
                "base model: sketch both datasets under the same model (`fisherhub sketch --model MODEL` for each; "
                "`--like` a signature of another model is refused)."
            )
        else:
            hint = (
                "Sketch one again with the other's spec: `fisherhub sketch --like OTHER.safetensors ...` "
                "(`like=` the other signature in Python)."
            )
        super().__init__(f"cannot compare {what} with different sketch ids; differing fields: {fields}. {hint}")


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
