"""The target's signatures: given (a ``Signature`` or a reference to signature files), or sketched from texts or
a dataset with a candidate's spec (``like=``), under the base model."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from fisherhub.core.errors import InputError, TooFewDocumentsError
from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.hub.refs import is_signature_reference
from fisherhub.lm.loading import load_base_model
from fisherhub.options import DataOptions, RunOptions
from fisherhub.selection.candidates import hub_options
from fisherhub.selection.errors import Skip
from fisherhub.selection.ranking import incompatibility


@dataclasses.dataclass(frozen=True)
class SketchOptions:
    """How a target given as texts or a dataset is sketched (with each candidate's spec, ``like=``)."""

    data: DataOptions | None = None  # columns, split, limits of a dataset target (its ``dataset`` is replaced)
    batch_size: int = RunOptions.batch_size
    max_length: int = DataOptions.max_length
    progress: bool = True


def _referenced_signatures(reference: str, base_model: str | None, token: str | None = None) -> list[Signature]:
    """The signatures a reference names: a local file, or a Hub reference (a repo: all its signatures for
    ``base_model``)."""
    from fisherhub.hub import SignatureRef, load_signature

    ref = SignatureRef.parse(reference)
    if os.path.isfile(reference) or ref is None or ref.path is not None:
        return [load_signature(reference, token=token)]  # a file, or a clear error for what is not a reference
    options = hub_options(ref.repo_id, ref.repo_type, ref.revision, token=token)
    matching = [option.load() for option in options if option.is_for(base_model)]
    if not matching:
        wanted = f" for {base_model}" if base_model else ""
        named = sorted({repr(option.base_model) for option in options})
        has = f"; its signatures are for {', '.join(named)}" if named else ""
        raise InputError(
            f"{reference}: the repo has no signature{wanted} to use as the target{has} (`fisherhub list` it)"
        )
    return matching


def given_signatures(target: Any, base_model: str | None, token: str | None = None) -> list[Signature] | None:
    """The signatures a ``Signature`` or signature-reference target is; None for a target to sketch."""
    if isinstance(target, Signature):
        return [target]
    if isinstance(target, (str, os.PathLike)) and is_signature_reference(os.fspath(target)):
        return _referenced_signatures(os.fspath(target), base_model, token)
    return None


def data_to_sketch(target: Any) -> Any:
    """A target to sketch, checked: a list of texts, a ``datasets`` Dataset, or a dataset id / folder / file."""
    if isinstance(target, (list, tuple)):
        if not target or not all(isinstance(text, str) for text in target):
            raise InputError("a target list must hold texts (strings), at least one")
        return list(target)
    if not isinstance(target, (str, os.PathLike)) and not hasattr(target, "column_names"):
        raise InputError(
            f"target must be a Signature, a signature reference, a datasets Dataset or id, or a list of texts; "
            f"got {type(target).__name__}"
        )
    return target


def _base_model_metadata(base_model: str | None, model, like: Signature) -> dict[str, str]:
    """What the target's signature records about its base model (the embedded default by its one id)."""
    from fisherhub.lm.loading import model_provenance

    if not base_model:
        return {}
    return model_provenance(base_model, model, like.metadata.get("base_model_revision") or None).as_metadata()


class TargetSketcher:
    """Sketches a texts / dataset target with a candidate's spec, loading the base model on first use."""

    def __init__(self, data: Any, model, tokenizer, base_model: str | None, options: SketchOptions):
        self.data, self.model, self.tokenizer = data, model, tokenizer
        self.base_model, self.options = base_model, options

    def _model(self, like: Signature):
        if self.model is None or self.tokenizer is None:
            loaded_model, loaded_tokenizer = load_base_model(self.base_model, like)
            self.model = self.model if self.model is not None else loaded_model
            self.tokenizer = self.tokenizer if self.tokenizer is not None else loaded_tokenizer
        return self.model, self.tokenizer

    def _data_args(self) -> DataOptions:
        """What the sketch reads: the texts as one-column dataset, or the dataset with ``options.data``."""
        import datasets

        if isinstance(self.data, list):
            return DataOptions(datasets.Dataset.from_dict({"text": self.data}), max_length=self.options.max_length)
        return dataclasses.replace(
            self.options.data or DataOptions(self.data, max_length=self.options.max_length), dataset=self.data
        )

    def batches(self) -> list:
        """The target's documents exactly as the sketch read them (columns, limits, ``max_length`` within the
        model's positions, scored labels), in batches of ``options.batch_size`` (``data.batches.Batch``)."""
        from fisherhub.data.stream import DocumentStream
        from fisherhub.lm.positions import within_model_context

        if self.model is None:
            raise InputError("the target has not been sketched yet: there is no base model to read it with")
        data = within_model_context(self._data_args(), self.model)
        return list(DocumentStream(data, self.tokenizer).batches(self.options.batch_size))

    def __call__(self, like: Signature) -> Signature:
        from fisherhub.lm.specs import spec_for_model
        from fisherhub.pipeline.loop import sketch_dataset

        model, tokenizer = self._model(like)
        try:
            spec: SketchSpec = spec_for_model(model, tokenizer, like=like)
        except InputError as exc:
            theirs = like.metadata.get("base_model") or "an unnamed base model"
            raise Skip(
                f"other base model: its signature is for {theirs!r}, the target is sketched under "
                f"{self.base_model or 'the given model'!r}: {exc}"
            ) from exc
        metadata = _base_model_metadata(self.base_model or like.metadata.get("base_model"), model, like)
        try:
            data = self._data_args()
            return sketch_dataset(
                data.dataset,
                model,
                tokenizer,
                spec,
                data=data,
                batch_size=self.options.batch_size,
                progress=self.options.progress,
                metadata=metadata,
            )
        except TooFewDocumentsError as exc:
            raise TooFewDocumentsError(
                f"the target has too few tokens to sketch: {exc} Give the target more text (a few dozen documents "
                "or a few hundred scored tokens at least)."
            ) from exc


class Target:
    """The target's signatures by sketch id: given ones, or sketched on demand with a candidate's spec (once per
    sketch id)."""

    def __init__(self, signatures: list[Signature] | None, sketcher: TargetSketcher | None = None):
        self.signatures = {signature.sketch_id: signature for signature in signatures or ()}
        self.sketcher = sketcher

    def like(self, candidate: Signature) -> Signature:
        """The target's signature comparable with ``candidate`` (``Skip`` naming what differs when there is none)."""
        if candidate.sketch_id not in self.signatures and self.sketcher is not None:
            self.signatures[candidate.sketch_id] = self.sketcher(candidate)
        target = self.signatures.get(candidate.sketch_id) or next(iter(self.signatures.values()))
        reason = incompatibility(target.spec, candidate.spec)
        if reason is not None:
            raise Skip(reason)
        return target
