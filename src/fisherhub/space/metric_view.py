"""The metric Space's result for two uploaded signature files: what the ``fisher_alignment`` module's
``compute`` returns for them, and ``fisherhub.alignment``'s A, S_a, S_e and ρ, each ± its standard error, with
the flags a reader needs (numbers not to be trusted or noise, values above 1, an undefined ρ). No Gradio here:
``space/metric_app.py`` lays it out. Files are named as uploaded, never by their local path."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from fisherhub.core.alignment import AlignmentResult, alignment
from fisherhub.core.errors import FisherHubError, InputError, SignatureFileError
from fisherhub.core.signature import Signature
from fisherhub.space.text import escape, markdown_table, with_error


def result_flags(result: AlignmentResult) -> list[str]:
    """What the numbers of one pair need said: why they are not to be trusted or are noise (``AlignmentResult``'s
    ``doubt`` and ``noise``, the checks under every surface), and ``fisherhub.legend``'s lines that apply."""
    from fisherhub.legend import ABOVE_ONE, BLANK_COUPLING

    flags = [f"not to be trusted: {result.doubt}"] if result.doubt else []
    flags += [f"noise: {result.noise}"] if result.noise else []
    flags += [ABOVE_ONE] if max(result.fisher, result.activation, result.error) > 1.0 else []
    return flags + ([BLANK_COUPLING] if result.coupling is None else [])


@dataclasses.dataclass(frozen=True)
class MetricComparison:
    """Two signature files compared: the module's output, ``alignment``'s result, the flags."""

    names: tuple[str, str]
    output: dict[str, Any]
    result: AlignmentResult
    flags: list[str]

    def markdown(self) -> str:
        source, target = (escape(name) for name in self.names)
        r = self.result
        table = markdown_table(
            ["A (Fisher alignment)", "S_a (activations)", "S_e (errors)", "ρ (coupling)"],
            [
                [
                    with_error(r.fisher, r.stderr),
                    with_error(r.activation, r.activation_stderr),
                    with_error(r.error, r.error_stderr),
                    with_error(r.coupling, r.coupling_stderr),
                ]
            ],
        )
        lines = [f"**{source}** (source) against **{target}** (target), sketch id {escape(r.sketch_id)}:", "", table]
        if self.flags:
            lines += ["", *(f"- ⚠ {escape(flag)}" for flag in self.flags)]
        return "\n".join(lines)

    def output_json(self) -> str:
        return json.dumps(self.output, indent=1)


def _load(path: str | os.PathLike, shown_as: str) -> Signature:
    try:
        return Signature.load(path)
    except SignatureFileError as exc:
        reason = str(exc).replace(os.fspath(path), shown_as).removeprefix(f"{shown_as}: ")
        raise InputError(f"{shown_as} is not a fisherhub signature: {reason}") from exc


def compare_files(module: Any, paths: tuple[str, str], names: tuple[str, str]) -> MetricComparison:
    """``module.compute(predictions=[source], references=[target])`` of the files ``paths`` (shown as ``names``),
    beside ``alignment(source, target)``; ``InputError`` naming the file for a file that is not a signature or a
    pair that cannot be compared."""
    source, target = (_load(path, name) for path, name in zip(paths, names))
    source.spec.require_compatible(target.spec, what=f"{names[0]} and {names[1]}")
    try:
        output = module.compute(predictions=[os.fspath(paths[0])], references=[os.fspath(paths[1])])
    except FisherHubError as exc:
        message = str(exc)
        for path, name in zip(paths, names):
            message = message.replace(os.fspath(path), name)
        raise InputError(message) from exc
    result = alignment(source, target)
    return MetricComparison(names, output, result, result_flags(result))
