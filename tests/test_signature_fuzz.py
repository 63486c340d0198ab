"""The signature loader against forged and damaged files (issue 15, case 3): the checksum guards against
damage, not forgery, so the loader checks dtypes, shapes, finite values and counts itself. A seeded fuzz of
truncations, bit flips and header edits: every file is refused with ``SignatureFileError`` or loads sane."""

from __future__ import annotations

import contextlib

import json
import random
import struct

import pytest
import torch
from fisherhub.testing.oracles import sketch, synthetic_task
from safetensors import SafetensorError
from safetensors.torch import load, save

from fisherhub import Signature, SketchSpec
from fisherhub.core.errors import SignatureFileError

FUZZ_CASES = 400


@pytest.fixture(scope="module")
def signature() -> Signature:
    spec = SketchSpec(d=8, vocab_size=64, m=64).with_fingerprint("0123456789abcdef", "fedcba9876543210")
    spec = spec.with_reflection(torch.linspace(1.0, 2.0, 8))
    return sketch(spec, *synthetic_task(300, 8, 64, seed=0), doc_index=torch.arange(300) // 3)


def split_file(data: bytes) -> tuple[dict, bytes]:
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def join_file(header: dict, body: bytes) -> bytes:
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + body


def forged(signature: Signature, tensors: dict[str, torch.Tensor] | None = None, **metadata: str) -> bytes:
    """A file with edited tensors / metadata and a checksum recomputed the way the writer computes it."""
    tensors = {**signature._tensors(), **(tensors or {})}
    header = {**signature._header(), **metadata}
    header["checksum"] = Signature._checksum(tensors, header)
    return save(tensors, metadata=header)


def assert_sane(loaded: Signature) -> None:
    """What a loaded signature guarantees to ``alignment``: float32 finite means of shape (m,), positive
    finite float64 split norms, and counts of at least 2 documents with at least one token each."""
    for name in ("joint", "activation", "error"):
        tensor = getattr(loaded, name)
        assert tensor.dtype == torch.float32 and tensor.shape == (loaded.spec.m,) and torch.isfinite(tensor).all()
    norms = loaded.split_norms
    assert norms.dtype == torch.float64 and norms.shape == (3,) and torch.isfinite(norms).all() and (norms > 0).all()
    assert isinstance(loaded.num_tokens, int) and isinstance(loaded.num_documents, int)
    assert 2 <= loaded.num_documents <= loaded.num_tokens < 2**63


def test_forged_int32_joint_is_refused(signature):
    """An int32 ``joint`` with a recomputed checksum loaded and gave A = 1,019,976 before."""
    data = forged(signature, {"joint": (signature.joint * 1e6).to(torch.int32)})
    with pytest.raises(
        SignatureFileError,
        match=r"<bytes>: tensor 'joint' is int32 of shape \(64,\); a signature "
        r"stores it as float32 of shape \(64,\)",
    ):
        Signature.from_bytes(data)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"num_tokens": "-5"},
            r"num_tokens = -5 and num_documents = 100: a signature has at least 2 documents, each "
            r"with at least one scored token",
        ),
        ({"num_documents": "1"}, r"num_tokens = 300 and num_documents = 1"),
        ({"num_documents": "301"}, r"num_tokens = 300 and num_documents = 301"),
        ({"num_tokens": "3e2"}, r"num_tokens '3e2' is not an integer"),
    ],
)
def test_forged_counts_are_refused(signature, edit, message):
    with pytest.raises(SignatureFileError, match=message):
        Signature.from_bytes(forged(signature, **edit))


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"joint": torch.full((64,), float("nan"))}, r"tensor 'joint' contains NaN or inf"),
        (
            {"split_norms": torch.tensor([1.0, float("inf"), 1.0], dtype=torch.float64)},
            r"split_norms must be 3 "
            r"positive finite numbers",
        ),
        (
            {"split_norms": torch.ones(3)},
            r"tensor 'split_norms' is float32 of shape \(3,\); a signature stores it as "
            r"float64 of shape \(3,\)",
        ),
        ({"reflection": torch.ones(4)}, r"<bytes>: reflection has 4 entries, expected d=8"),
        ({"extra": torch.ones(2)}, r"unexpected tensor\(s\) \['extra'\]"),
    ],
)
def test_forged_tensors_are_refused(signature, tensors, message):
    with pytest.raises(SignatureFileError, match=message):
        Signature.from_bytes(forged(signature, tensors))


def test_an_honest_forgery_of_sane_values_loads(signature):
    """The checksum is no signature: a recomputed one over sane values loads (docs/SPEC.md says so)."""
    loaded = Signature.from_bytes(forged(signature, num_tokens="301"))
    assert_sane(loaded)
    assert loaded.num_tokens == 301 and torch.equal(loaded.joint, signature.joint)


def _header_edit(rng: random.Random, header: dict) -> None:
    """One random edit of the safetensors header: a tensor's dtype, shape or offsets, or a metadata value."""
    tensors = [name for name in header if name != "__metadata__"]
    metadata = header["__metadata__"]
    choice = rng.randrange(6)
    if choice == 0:
        header[rng.choice(tensors)]["dtype"] = rng.choice(["I32", "F16", "BF16", "I64", "U8", "F64", "F32", "BOOL"])
    elif choice == 1:
        entry = header[rng.choice(tensors)]
        entry["shape"] = rng.choice([[], [0], [entry["shape"][0] // 2], [entry["shape"][0] * 2], [-1], [2, 4], [1, 64]])
    elif choice == 2:
        entry = header[rng.choice(tensors)]
        entry["data_offsets"] = [value + rng.choice([-8, -4, 4, 8, 10**9]) for value in entry["data_offsets"]]
    elif choice == 3:
        key = rng.choice(sorted(metadata))
        metadata[key] = rng.choice(["-5", "0", "1", "nan", "inf", "1e309", "", "x", "99999999999999999999", "[]", "{}"])
    elif choice == 4:
        del metadata[rng.choice(sorted(metadata))]
    else:
        key = rng.choice(sorted(metadata))
        metadata[key] = rng.choice([None, 5, [], {}, True])


def _damaged(rng: random.Random, data: bytes, signature: Signature) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:  # truncation
        return data[: rng.randrange(len(data))]
    if kind == 1:  # bit flips anywhere
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            position = rng.randrange(len(damaged))
            damaged[position] ^= 1 << rng.randrange(8)
        return bytes(damaged)
    header, body = split_file(data)
    _header_edit(rng, header)
    if kind == 3:  # a forger's edit: the checksum recomputed over what the edited header makes of the data
        try:
            tensors = load(join_file(header, body))
            metadata = {k: v for k, v in header["__metadata__"].items() if k != "checksum"}
            header["__metadata__"]["checksum"] = Signature._checksum(tensors, metadata)
        except (SafetensorError, TypeError, ValueError):  # the forger's own tooling refuses: written as edited
            pass
    return join_file(header, body)


def test_fuzzed_files_are_refused_or_load_sane(signature):
    data = signature.to_bytes()
    rng = random.Random(15)
    outcomes = {"refused": 0, "loaded": 0}
    for case in range(FUZZ_CASES):
        damaged = _damaged(rng, data, signature)
        try:
            loaded = Signature.from_bytes(damaged, source=f"case {case}")
        except SignatureFileError as exc:
            assert str(exc).startswith(f"case {case}: "), str(exc)
            outcomes["refused"] += 1
            continue
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"case {case}: {type(exc).__name__}: {exc}")
        assert_sane(loaded)
        outcomes["loaded"] += 1
    assert outcomes["refused"] > FUZZ_CASES * 0.8, outcomes


# -- issue 23: values forged with a recomputed checksum, and hostile index files ------------------------------------

VALUE_CASES = 520
INDEX_CASES = 520


def _value_forgery(rng: random.Random, signature: Signature) -> bytes:
    """A file whose numbers are edited (the checksum recomputed): split norms or means scaled by up to 10^±40,
    negated, spiked, swapped, or structurally damaged as in ``_damaged``."""
    tensors = {name: tensor.clone() for name, tensor in signature._tensors().items()}
    kind = rng.randrange(7)
    if kind == 0:
        norms = tensors["split_norms"]
        which = rng.choice([[0], [1], [2], [0, 1, 2]])
        norms[which] = norms[which] * 10.0 ** rng.uniform(-40, 40)
    elif kind == 1:
        name = rng.choice(["joint", "activation", "error"])
        tensors[name] = (tensors[name].double() * 10.0 ** rng.uniform(-30, 30)).float()
    elif kind == 2:
        name = rng.choice(["joint", "activation", "error"])
        tensors[name][rng.randrange(len(tensors[name]))] = rng.choice([3e38, -3e38, 1e-38, 0.0, 1e20])
    elif kind == 3:
        a, b = rng.sample(["joint", "activation", "error"], 2)
        tensors[a], tensors[b] = tensors[b], tensors[a]
    elif kind == 4:
        name = rng.choice(["joint", "activation", "error"])
        tensors[name] = -tensors[name]
    elif kind == 5:
        tensors["split_norms"] = torch.tensor(
            [rng.choice([1e-300, 1e-30, 1e-3, 1.0, 1e30, 1e300]) for _ in range(3)], dtype=torch.float64
        )
    else:
        return _damaged(rng, signature.to_bytes(), signature)
    return forged(signature, tensors)


def test_fuzzed_values_are_refused_or_flagged_and_never_ranked_above_plausible(signature, tmp_path):
    """VALUE_CASES forged files in selections with an honest candidate: nothing crashes; every row whose
    numbers are implausible carries a doubt and ranks below every row without one; no row without a doubt
    shows an estimate outside [0, 1] by more than 4 standard errors or a non-finite one."""
    import math

    from fisherhub.selection import select_adapter
    from fisherhub.core.plausibility import PLAUSIBLE_Z

    spec = signature.spec
    target = sketch(spec, *synthetic_task(300, 8, 64, seed=1), doc_index=torch.arange(300) // 3)
    honest = tmp_path / "honest.safetensors"
    signature.save(honest)
    shared = (
        (target.self_dominances() - 1).clamp_min(0).tolist()
    )  # the most shared documents can add (at most the target's)
    rng = random.Random(23)
    loaded = doubted = 0
    for batch in range(VALUE_CASES // 40):
        files = []
        for case in range(40):
            path = tmp_path / f"case-{batch}-{case}.safetensors"
            path.write_bytes(_value_forgery(rng, signature))
            files.append(str(path))
        selection = select_adapter(target, [*files, str(honest)])
        selection.table()  # renders
        rows = selection.ranking
        flags = [row.doubt is not None for row in rows]
        assert flags == sorted(flags), "a doubted row ranks above a plausible one"
        for row in rows:
            if row.doubt is None:
                for value, stderr, excess in zip(
                    (row.fisher, row.activation, row.error),
                    (row.alignment.stderr, row.alignment.activation_stderr, row.alignment.error_stderr),
                    shared,
                ):
                    assert math.isfinite(value) and math.isfinite(stderr)
                    assert -PLAUSIBLE_Z * stderr <= value <= 1 + excess + PLAUSIBLE_Z * stderr, row
        loaded += len(rows) - 1
        doubted += sum(flags)
        assert len(rows) + len(selection.skipped) == 41
    assert loaded > 100 and doubted > 50, (loaded, doubted)


def _index_mutation(rng: random.Random, entries: list[dict]) -> bytes:
    """A hostile ``index.json``: bad paths, types, counts, control characters, deep nesting, size, garbage."""
    entry = dict(rng.choice(entries))
    kind = rng.randrange(9)
    if kind == 0:
        entry["path"] = rng.choice(
            [
                "../../etc/passwd",
                "/etc/passwd",
                ".fisher_signatures/../x.safetensors",
                ".fisher_signatures//x.safetensors",
                "",
                "README.md",
                "C:\\x.safetensors",
                ".fisher_signatures/" + "a" * 5000 + ".safetensors",
            ]
        )
    elif kind == 1:
        entry[rng.choice(["tokens", "documents"])] = rng.choice(
            ["12x", 1e400, -1, 2**70, True, None, [], {"a": 1}, 1.5]
        )
    elif kind == 2:
        entry[rng.choice(["base_model", "dataset", "sketch_id"])] = rng.choice(
            ["\x1b[2J\x1b]0;pwned\x07", "a\nb", "\u202eevil", {"nested": [1]}, [1, 2], 10**30]
        )
    elif kind == 3:
        return b"[" * rng.choice([1000, 100_000]) + b"]" * 10
    elif kind == 4:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    elif kind == 5:
        document = {
            "kind": rng.choice(["fisherhub-signature-index", "other", None]),
            "version": rng.choice([1, 2, "1", None]),
            "signatures": rng.choice([[entry], entry, "x", None, [[1]]]),
        }
        return json.dumps(document).encode()
    elif kind == 6:
        return b" " * (5 * 2**20)
    elif kind == 7:
        del entry["path"]
    else:
        entry = {**entry, **{f"k{i}": "v" * rng.randrange(100) for i in range(rng.randrange(50))}}
    document = {"kind": "fisherhub-signature-index", "version": 1, "signatures": [entry, *entries]}
    data = json.dumps(document).encode()
    return data[: rng.randrange(len(data))] if rng.random() < 0.1 else data


def test_fuzzed_index_files_never_crash_listing_loading_or_selection(signature, tmp_path):
    """INDEX_CASES hostile index files in an adapter folder: ``list_signatures`` and ``load_signature`` answer or
    raise a FisherHubError; a selection with it among an honest candidate completes; nothing printed holds a
    control character."""
    from fisherhub import FisherHubError
    from fisherhub.hub import list_signatures, load_signature, push_signature
    from fisherhub.selection import select_adapter

    target = sketch(signature.spec, *synthetic_task(300, 8, 64, seed=1), doc_index=torch.arange(300) // 3)
    target = Signature.from_bytes(forged(target, base_model="org/base"))
    honest = Signature.from_bytes(forged(signature, base_model="org/base"))
    good, hostile = tmp_path / "good", tmp_path / "hostile"
    for folder in (good, hostile):
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base"}))
        push_signature(honest, folder)
    index = hostile / ".fisher_signatures" / "index.json"
    entries = json.loads(index.read_text())["signatures"]
    rng = random.Random(2323)
    answered = refused = 0
    for case in range(INDEX_CASES):
        index.write_bytes(_index_mutation(rng, entries))
        try:
            infos = list_signatures(hostile)
            answered += 1
            assert all(not any(ord(c) < 32 or c == "\u202e" for c in str(info.metadata) + info.path) for info in infos)
        except FisherHubError:
            refused += 1
        with contextlib.suppress(FisherHubError):
            load_signature(hostile)
        if case % 10 == 0:
            selection = select_adapter(target, [str(good), str(hostile)])
            assert selection.best.candidate == str(good) or selection.best.doubt is None
    assert answered + refused == INDEX_CASES and refused > INDEX_CASES // 3, (answered, refused)
