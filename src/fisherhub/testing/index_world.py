"""A signature index of a few dozen adapters on the local Hub server, for the index Space's tests and
screenshots: adapters on four topics (each topic predicts its own block of the vocabulary, so the adapters of
one topic are each other's nearest neighbours), three licenses, topic tags, each signed with a signature of its
topic's synthetic task, the index built through the real client (``build_index``)."""

from __future__ import annotations

import os

from fisherhub.core.signature import Signature
from fisherhub.core.spec import SketchSpec
from fisherhub.testing.oracles import sketch, synthetic_task

#: topic -> the block of the vocabulary its task predicts (each adapter's block is shifted by up to 2 from its topic's,
#: so that A among the adapters of a topic is graded)
TOPICS = {"code": (0, 8), "math": (8, 16), "chat": (16, 24), "legal": (24, 32)}
LICENSES = ("apache-2.0", "mit", "cc-by-4.0")
D, VOCAB, M = 8, 32, 256


def topic_signature(
    base_model: str, topic: str, seed: int, *, shift: int = 0, tokens: int = 240, m: int = M, **metadata: str
) -> Signature:
    """A signature of ``topic``'s synthetic task (its block ``shift``-ed) under ``base_model`` (whose name the head
    checksum stands for), of sketch size ``m``."""
    spec = SketchSpec(d=D, vocab_size=VOCAB, m=m).with_fingerprint(head_checksum=f"head-of-{base_model}")
    low, high = TOPICS[topic]
    block = (min(low + shift, VOCAB - 1), min(high + shift, VOCAB))
    activations, errors = synthetic_task(tokens, D, VOCAB, seed=seed, label_block=block)
    signature = sketch(spec, activations, errors)
    signature.metadata.update({"base_model": base_model, **metadata})
    return signature


def adapter_topic(k: int) -> str:
    return list(TOPICS)[k % len(TOPICS)]


def publish_index_world(
    api, base_model: str, index: str, count: int, work: str | os.PathLike, owner: str = "org"
) -> list[str]:
    """``count`` signed adapters of ``base_model`` (``owner/<topic>-lora-<k>``: topic k mod 4, its block shifted by
    (k div 4) mod 3, license k mod 3, ``200 + 10 k`` tokens, the dataset ``owner/<topic>-data-<k>`` at a recorded revision), then the index
    ``index`` of them; returns the adapters' repo ids."""
    from fisherhub.hub import push_signature
    from fisherhub.hub.signature_index import build_index
    from fisherhub.testing.hub_repos import create_adapter

    repo_ids = []
    for k in range(count):
        topic = adapter_topic(k)
        repo_id = create_adapter(
            api,
            f"{owner}/{topic}-lora-{k:02d}",
            base_model,
            card={"license": LICENSES[k % len(LICENSES)], "tags": [topic, "lora"]},
        )
        signature = topic_signature(
            base_model,
            topic,
            seed=k,
            shift=(k // len(TOPICS)) % 3,
            tokens=200 + 10 * k,
            dataset=f"{owner}/{topic}-data-{k:02d}",
            dataset_revision=f"{k:040x}",
        )
        push_signature(signature, repo_id)
        repo_ids.append(repo_id)
    build_index(base_model, index, work=work)
    return repo_ids
