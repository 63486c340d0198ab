"""``fisherhub sketch``: the signature of a dataset under a base model (also ``scripts/sketch.py``).

One process: ``fisherhub sketch --dataset DATA --output sig.safetensors``. N processes:
``accelerate launch [launch options] -m fisherhub sketch --dataset DATA ...`` (or ``scripts/sketch.py``
in a checkout; see docs/distributed.md). ``python -m fisherhub.cli.sketch`` runs it too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fisherhub.core.spec import ESTIMATORS, FISHER_TYPES, GRANULARITIES
from fisherhub.defaults import DEFAULT_DTYPE


def _json_object(value: str) -> dict:
    """A JSON object given inline or as the path of a JSON file."""
    text = Path(value).read_text() if Path(value).is_file() else value
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not a JSON object or a JSON file: {value!r} ({exc})") from exc
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {type(parsed).__name__}: {value!r}")
    return parsed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", required=True, help="Hub dataset id, local folder (save_to_disk), or data file/glob")
    data.add_argument("--config", default=None, help="dataset configuration name")
    data.add_argument("--split", default="train")
    data.add_argument("--revision", default=None, help="dataset revision (branch, tag or commit)")
    data.add_argument("--text-column", default="text")
    data.add_argument("--messages-column", default=None, help="chat column: only assistant tokens are scored")
    data.add_argument("--streaming", action="store_true", help="stream the dataset instead of loading it")
    data.add_argument("--max-documents", type=int, default=None)
    data.add_argument("--max-tokens", type=int, default=None, help="stop after this many scored tokens")
    data.add_argument("--max-length", type=int, default=512, help="truncate documents to this many tokens")

    model = parser.add_argument_group("model")
    model.add_argument("--model", default=None, help="model id or folder (default: embedded SmolLM2-135M-Instruct)")
    model.add_argument("--model-revision", default=None, help="revision (branch, tag or commit) of a Hub model id")
    model.add_argument("--dtype", default=DEFAULT_DTYPE, choices=("auto", "float32", "bfloat16", "float16"),
                       help="model dtype; auto (default) is the checkpoint's own. Softmax and e are float32 anyway")
    model.add_argument("--device-map", default=None, metavar="MAP",
                       help="from_pretrained's device_map, e.g. auto: one process spreads a model that does not fit "
                            "one device over all of them (not with several processes)")
    model.add_argument("--trust-remote-code", action="store_true", help="run the model repo's own modeling code")
    model.add_argument("--quantization-config", default=None, type=_json_object, metavar="JSON|FILE",
                       help='transformers quantization config as JSON or a JSON file, e.g. \'{"quant_method": '
                            '"bitsandbytes", "load_in_4bit": true}\' (the head stays unquantized)')
    model.add_argument("--gguf-file", default=None, metavar="NAME",
                       help="load this GGUF file of the --model folder or Hub repo (de-quantized by transformers)")
    model.add_argument("--cpu", action="store_true", default=None, help="run on the CPU even if a GPU is present")

    sketch = parser.add_argument_group("sketch")
    sketch.add_argument("--like", default=None, help="reuse the exact spec of this signature (file or Hub ref)")
    sketch.add_argument("-m", "--m", type=int, default=4096, help="number of random features")
    sketch.add_argument("--seed", type=int, default=0)
    sketch.add_argument("--estimator", default=None, choices=sorted(ESTIMATORS))
    sketch.add_argument("--granularity", default="token", choices=GRANULARITIES)
    sketch.add_argument("--fisher", default="empirical", choices=FISHER_TYPES)
    sketch.add_argument("--reflection", action=argparse.BooleanOptionalAction, default=True,
                        help="Householder reflection on the pilot activation mean (default on): about half the "
                             "standard error; signatures compare when their pilot directions agree within 1e-4 rad "
                             "(float32 on any device does; a bfloat16 run may not: then sketch --like the other)")

    run = parser.add_argument_group("run")
    run.add_argument("--batch-size", type=int, default=8)
    run.add_argument("--token-chunk-size", type=int, default=256, help="scored tokens per softmax chunk")
    run.add_argument("--checkpoint", default=None, help="folder for per-process checkpoints")
    run.add_argument("--checkpoint-every", type=int, default=100, help="batches between checkpoints")
    run.add_argument("--resume", action="store_true", help="continue from --checkpoint after an interruption")
    run.add_argument("-o", "--output", default="signature.safetensors")
    run.add_argument("--push-to-hub", default=None, metavar="REPO", help="also push the signature to this Hub repo")
    run.add_argument("--repo-type", default="dataset", choices=("dataset", "model"), help="type of --push-to-hub repo")
    run.add_argument("--no-progress", dest="progress", action="store_false")


def sketch_args(namespace: argparse.Namespace):
    from fisherhub.data import DataArgs
    from fisherhub.sketcher import SketchArgs

    data = DataArgs(
        dataset=namespace.dataset, config=namespace.config, split=namespace.split, revision=namespace.revision,
        text_column=namespace.text_column, messages_column=namespace.messages_column, streaming=namespace.streaming,
        max_documents=namespace.max_documents, max_tokens=namespace.max_tokens, max_length=namespace.max_length,
    )
    return SketchArgs(
        data=data, model=namespace.model, model_revision=namespace.model_revision, dtype=namespace.dtype,
        device_map=namespace.device_map, trust_remote_code=namespace.trust_remote_code,
        quantization_config=namespace.quantization_config, gguf_file=namespace.gguf_file,
        m=namespace.m, seed=namespace.seed, estimator=namespace.estimator, granularity=namespace.granularity,
        fisher=namespace.fisher, reflection=namespace.reflection, like=namespace.like,
        batch_size=namespace.batch_size, token_chunk_size=namespace.token_chunk_size,
        checkpoint=namespace.checkpoint, checkpoint_every=namespace.checkpoint_every, resume=namespace.resume,
        output=namespace.output, push_to_hub=namespace.push_to_hub, push_repo_type=namespace.repo_type,
        cpu=namespace.cpu, progress=namespace.progress,
    )


def run(namespace: argparse.Namespace) -> int:
    from fisherhub.allocator import keep_freed_memory
    from fisherhub.sketcher import sketch

    keep_freed_memory()
    signature = sketch(sketch_args(namespace))
    if namespace.output and _is_main_process():
        print(
            f"wrote {namespace.output}: sketch id {signature.sketch_id}, {signature.num_documents} documents, "
            f"{signature.num_tokens} scored tokens"
        )
    return 0


def _is_main_process() -> bool:
    from accelerate import PartialState

    return PartialState().is_main_process


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sketch", help="sketch a dataset under a base model into a signature file",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sketch.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
