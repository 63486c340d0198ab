"""Bounded claims (issue 32, item 3): a signature file tampered with (its checksum recomputed) is refused, or its
alignments come back marked with the check they fail, through every surface that shows an alignment:
``fisherhub.alignment``, ``fisherhub compare``, the ``evaluate`` metric, ``nearest``, ``select_adapter`` (and
``fisherhub select``), ``index show`` and ``select --index``. What no check can see in the numbers is shown to be
caught by ``verify`` (the re-sketch's comparison). SPEC §3, "Bounded claims", has the table this file tests."""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable

import pytest
import torch
from fisherhub.testing.oracles import sketch, synthetic_task
from test_signature_fuzz import forged

from fisherhub import Signature, SignatureFileError, SketchSpec, alignment
from fisherhub.analysis.nearest import rank_nearest
from fisherhub.cli import main
from fisherhub.core.errors import ImplausibleAlignmentWarning, InputError
from fisherhub.core.plausibility import ALIGNMENT_RANGE, SELF_DOMINANCE, SHARED_PARTS
from fisherhub.core.signature import HEADER_CHECK, VALUES_CHECK
from fisherhub.selection import select_adapter
from fisherhub.verify import compare

SPEC = SketchSpec(d=8, vocab_size=64, m=1024).with_fingerprint("0123456789abcdef")
BASE = "org/base"


def task(seed: int, block: tuple[int, int], n: int = 400) -> Signature:
    signature = sketch(SPEC, *synthetic_task(n, 8, 64, seed=seed, label_block=block), doc_index=torch.arange(n) // 2)
    return Signature.from_bytes(forged(signature, base_model=BASE, dataset=f"org/task-{seed}"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The target, a near task (A ≈ 1 with the target) and a far one (A ≈ 0.4), saved as files."""
    folder = tmp_path_factory.mktemp("claims")
    signatures = {"target": task(0, (0, 16)), "near": task(1, (0, 16)), "far": task(2, (14, 46))}
    files = {}
    for name, signature in signatures.items():
        files[name] = str(folder / f"{name}.safetensors")
        signature.save(files[name])
    return {"folder": folder, "files": files, **signatures}


def _swap_activation(signature: Signature, world) -> bytes:
    """The activation sketch (and its split norm) of the far task in ``signature``'s file, headers intact."""
    other = world["far"]
    norms = torch.stack([signature.split_norms[0], other.split_norms[1], signature.split_norms[2]])
    return forged(signature, {"activation": other.activation, "split_norms": norms})


def _counts(signature: Signature, world) -> bytes:
    return forged(signature, num_tokens=str(signature.num_tokens * 10), num_documents=str(signature.num_documents * 10))


def _scaled(**factors: float | torch.Tensor):
    """A forgery with tensors multiplied in place."""

    def tamper(signature: Signature, world) -> bytes:
        return forged(signature, {name: getattr(signature, name) * factor for name, factor in factors.items()})

    return tamper


@dataclasses.dataclass(frozen=True)
class Case:
    """A tampering (``tamper(signature, world)``: the forged file's bytes) of the world's ``of``, compared with
    ``partner``; ``found``: how the checks find it ("refused" by the loader, a "doubt" of the file or the pair, or
    None: no check can, ``verify`` does) and ``check``, the check its reason names."""

    of: str
    partner: str
    found: str | None
    check: str
    tamper: Callable[[Signature, dict], bytes]

    def forge(self, world) -> bytes:
        return self.tamper(world[self.of], world)


CASES = {
    "split norms x 1e-3": Case("near", "target", "doubt", SELF_DOMINANCE, _scaled(split_norms=1e-3)),
    "joint values x 40": Case("far", "target", "doubt", SELF_DOMINANCE, _scaled(joint=40.0)),
    "joint values x 2.5, a near pair": Case("near", "target", "doubt", ALIGNMENT_RANGE, _scaled(joint=2.5)),
    "activation values x 3": Case("near", "target", "doubt", ALIGNMENT_RANGE, _scaled(activation=3.0)),
    "split norms x 1e-3, marked unresolved": Case(
        "near",
        "target",
        "doubt",
        ALIGNMENT_RANGE,
        lambda s, w: forged(s, {"split_norms": s.split_norms * 1e-3}, clamped_split_norms="joint,activation,error"),
    ),
    "activation sketch of another signature": Case("near", "near", "doubt", SHARED_PARTS, _swap_activation),
    "counts x 10, against the copied one": Case("near", "near", "doubt", SHARED_PARTS, _counts),
    "activation sketch of another signature, another partner": Case("near", "target", None, "", _swap_activation),
    "counts x 10": Case("near", "target", None, "", _counts),
    "split norms / 4, a far pair": Case("far", "target", "doubt", ALIGNMENT_RANGE, _scaled(split_norms=0.25)),
    "joint split norm / 4, a far pair": Case(
        "far", "target", None, "", _scaled(split_norms=torch.tensor([0.25, 1.0, 1.0], dtype=torch.float64))
    ),
    "documents above tokens": Case(
        "near", "target", "refused", VALUES_CHECK, lambda s, w: forged(s, num_documents=str(s.num_tokens + 1))
    ),
    "header m against the body": Case("near", "target", "refused", HEADER_CHECK, lambda s, w: forged(s, m="512")),
    "clamped marker naming no sketch": Case(
        "near", "target", "refused", HEADER_CHECK, lambda s, w: forged(s, clamped_split_norms="everything")
    ),
}
LOADED = {name: case for name, case in CASES.items() if case.found != "refused"}


def forged_file(world, name: str) -> str:
    path = world["folder"] / f"forged-{list(CASES).index(name)}.safetensors"
    path.write_bytes(CASES[name].forge(world))
    return str(path)


def test_every_tampering_is_refused_or_doubted_by_alignment_or_caught_by_verify(world):
    for name, case in CASES.items():
        data = case.forge(world)
        if case.found == "refused":
            with pytest.raises(SignatureFileError, match=case.check):
                Signature.from_bytes(data, source="forged.safetensors")
            continue
        forgery = Signature.from_bytes(data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = alignment(forgery, world[case.partner])
        warned = [w for w in caught if issubclass(w.category, ImplausibleAlignmentWarning)]
        if case.found == "doubt":
            assert f"(check: {case.check})" in result.doubt and not result.plausible, (name, result)
            assert len(warned) == 1 and case.check in str(warned[0].message), name
        else:  # inside every bound: only a re-sketch tells (verify compares the re-sketch with the file)
            assert result.doubt is None and not warned, (name, result.doubt)
            verification = compare(forgery, world[case.of])
            assert not verification.reproduced and "NOT reproduced" in verification.describe(), name
    honest = alignment(world["near"], world["target"])
    assert honest.doubt is None and honest.noise is None and 0.5 < honest.fisher < 1.5


def test_the_issue_forgery_is_no_longer_a_plain_number(world):
    """Split norms scaled by 1e-3 gave A = 9.7 with no flag; it is now marked on the source's own numbers."""
    forgery = Signature.from_bytes(CASES["split norms x 1e-3"].forge(world))
    with pytest.warns(ImplausibleAlignmentWarning, match="source: implausible split norms"):
        result = alignment(forgery, world["target"])
    assert result.fisher > 5 and result.source_doubt.startswith("implausible split norms: joint R̂")
    assert result.as_dict()["doubt"] == result.doubt and result.target_doubt is None


@pytest.mark.parametrize("name", list(CASES))
def test_compare_refuses_with_the_file_and_the_check(world, name, tmp_path, capsys):
    case = CASES[name]
    path, partner = forged_file(world, name), world["files"][case.partner]
    matrices = tmp_path / "matrices.json"
    code = main(["compare", path, partner, "--names", "forged", "partner", "--heatmap", "", "--json", str(matrices)])
    out, err = capsys.readouterr()
    if case.found is None:
        assert code == 0 and "!" not in out and err == "", err
        assert json.loads(matrices.read_text())["doubts"] == [[None, None], [None, None]]
        return
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: "), err
    assert path in err and f"(check: {case.check})" in err, err
    if case.found == "doubt":
        assert "!" in out and "not to be trusted" in out  # the tables mark the cells and say why
        doubts = json.loads(matrices.read_text())["doubts"]
        assert case.check in doubts[0][1] and case.check in doubts[1][0]


def test_compare_of_honest_signatures_passes_and_the_heatmap_marks_a_doubt(world, tmp_path, capsys):
    from fisherhub.core.alignment import alignment_matrix
    from fisherhub.plotting import DOUBTED_GID, alignment_figure

    files = world["files"]
    assert main(["compare", files["target"], files["near"], files["far"], "--heatmap", ""]) == 0
    out = capsys.readouterr().out
    assert "!" not in out and "not to be trusted" not in out
    forgery = Signature.from_bytes(CASES["split norms x 1e-3"].forge(world))
    figure = alignment_figure(alignment_matrix([world["target"], forgery], names=["target", "forged"]))
    assert sum(patch.get_gid() == DOUBTED_GID for axis in figure.axes for patch in axis.patches) == 4 * 3
    honest = alignment_figure(alignment_matrix([world["target"], world["near"]]))
    assert not any(patch.get_gid() == DOUBTED_GID for axis in honest.axes for patch in axis.patches)


@pytest.fixture(scope="module")
def metric():
    import evaluate

    from fisherhub.metric import metric_path

    return evaluate.load(metric_path())


@pytest.mark.parametrize("name", list(CASES))
def test_the_metric_carries_the_doubt(world, metric, name):
    case = CASES[name]
    path, partner = forged_file(world, name), world["files"][case.partner]
    honest = world["files"]["far" if case.partner == "target" else "target"]
    if case.found == "refused":
        with pytest.raises(InputError, match=f"cannot load the signature .*{case.check}"):
            metric.compute(predictions=[path], references=[partner])
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ImplausibleAlignmentWarning)
        results = metric.compute(predictions=[path, honest], references=[partner, partner])
    assert results["doubt"][1] is None
    if case.found == "doubt":
        assert f"(check: {case.check})" in results["doubt"][0]
    else:
        assert results["doubt"][0] is None


@pytest.mark.parametrize("name", list(LOADED))
def test_nearest_ranks_a_doubted_signature_after_every_plausible_one(world, name):
    case = CASES[name]
    forgery = Signature.from_bytes(case.forge(world))
    honest = "far" if case.partner == "target" else "target"
    neighbours = rank_nearest(world[case.partner], {"forged": forgery, honest: world[honest]})
    forged_one = next(n for n in neighbours if n.name == "forged")
    if case.found == "doubt":
        assert [n.name for n in neighbours] == [honest, "forged"] and case.check in forged_one.doubt
    else:
        assert forged_one.doubt is None


@pytest.mark.usefixtures("wide_terminal")
@pytest.mark.parametrize("name", list(CASES))
def test_select_ranks_it_last_or_skips_it(world, name):
    case = CASES[name]
    path = forged_file(world, name)
    honest = world["files"]["far" if case.partner == "target" else "target"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        selection = select_adapter(world[case.partner], [path, honest])
    if case.found == "refused":
        assert [row.candidate for row in selection.ranking] == [honest]
        [skipped] = selection.skipped
        assert skipped.candidate == path and case.check in skipped.reason
        return
    forged_row = next(row for row in selection.ranking if row.candidate == path)
    if case.found == "doubt":
        assert selection.ranking[-1] is forged_row and selection.best.candidate == honest
        assert f"(check: {case.check})" in forged_row.doubt and forged_row.implausible
        assert f"{path}: " in selection.table() and "2 !" in selection.table()
    else:
        assert forged_row.doubt is None


def test_a_doubted_candidate_is_never_mixed_in(world):
    path, near = forged_file(world, "split norms x 1e-3"), world["files"]["near"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        selection = select_adapter(world["target"], [path, near])
    assert selection.weights() == {near: 1.0, path: 0.0}


def test_select_refuses_when_no_candidate_is_to_be_trusted(world, capsys):
    path = forged_file(world, "split norms x 1e-3")
    assert main(["select", world["files"]["target"], path]) == 1
    out, err = capsys.readouterr()
    assert "1 !" in out and "error: no candidate is to be trusted" in err and SELF_DOMINANCE in err


def test_an_implausible_target_is_refused(world):
    forgery = Signature.from_bytes(CASES["split norms x 1e-3"].forge(world))
    with pytest.raises(InputError, match="target signature .* cannot be ranked against: implausible split norms"):
        select_adapter(forgery, [world["files"]["near"]])
    with pytest.raises(InputError, match="target signature cannot be ranked against"):
        rank_nearest(forgery, {"near": world["near"]})


def test_a_short_signature_is_noise_not_refused(tmp_path, capsys):
    """A signature its writer marked unresolved (too few documents) whose R̂ is beyond the bound: noise, flagged and
    warned by compare, ranked after the plausible candidates, never refused (exit 0)."""
    spec = SketchSpec(d=8, vocab_size=16, m=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(40):
            short = sketch(spec, *synthetic_task(20, 8, 16, seed=seed))
            if short.findings()[1] is not None:
                break
        else:
            pytest.fail("no short signature beyond the bound among 40 seeds")
        other = sketch(spec, *synthetic_task(400, 8, 16, seed=99))
        result = alignment(short, other)
    doubt, noise = short.findings()
    assert doubt is None and noise.startswith("unresolved split norms") and SELF_DOMINANCE in noise
    assert result.source_noise == noise and result.pair_doubt is None and result.norm_clamped
    short.save(tmp_path / "short.safetensors")
    other.save(tmp_path / "other.safetensors")
    files = [str(tmp_path / "short.safetensors"), str(tmp_path / "other.safetensors")]
    assert main(["compare", *files, "--heatmap", ""]) == 0
    out = capsys.readouterr().out
    assert "warning: short: unresolved split norms" in out and "!" not in out


def test_nearest_on_the_hub(world, hub, hf_api, hf_hub_cache):
    """``nearest_signatures``: a doubted signature ranks after the plausible ones, a refused file is left out with a
    warning naming it and the check."""
    from fisherhub.hub import push_signature
    from fisherhub.selection.nearest import nearest_signatures
    from fisherhub.testing.hub_repos import create_adapter

    for repo, signature in {"org/near": world["near"], "org/far": world["far"]}.items():
        push_signature(signature, create_adapter(hf_api, repo, BASE))
    for repo, name in {"org/forged": "split norms x 1e-3", "org/refused": "header m against the body"}.items():
        push_signature(world["far"], create_adapter(hf_api, repo, BASE))  # then the file replaced by a forgery
        [path] = [p for p in hub.files(repo, "model") if p.endswith(".safetensors")]
        hf_api.upload_file(path_or_fileobj=CASES[name].forge(world), path_in_repo=path, repo_id=repo)
    with pytest.warns(UserWarning, match=f"org/refused.* left out: .*{HEADER_CHECK}"):
        neighbours = nearest_signatures(world["target"])
    assert [n.name.split("@")[0] for n in neighbours] == ["org/near", "org/far", "org/forged"]
    assert neighbours[-1].doubt.startswith("source: implausible split norms") and neighbours[0].doubt is None


def test_out_of_range_with_a_short_signature_is_noise_and_shared_documents_are_allowed():
    from fisherhub.core.plausibility import pair_findings

    cosines, stderrs = torch.tensor([[[1.0, 3.0], [3.0, 1.0]]] * 3), torch.full((3, 2, 2), 0.1)
    doubts, noise = pair_findings(cosines, stderrs, torch.ones(3, 2), [10, 100], {})
    assert (
        doubts[0][1] is None and noise[0][1].startswith("noisy alignment") and "fewer than 20 documents" in noise[0][1]
    )
    doubts, noise = pair_findings(cosines, stderrs, torch.ones(3, 2), [20, 100], {})
    assert doubts[0][1].startswith("implausible alignment") and noise[0][1] is None
    # equal sketches (the same inputs under other labels, SPEC §5's witness): the estimate is R̂ itself
    doubts, _ = pair_findings(
        torch.full((3, 2, 2), 1.3), torch.full((3, 2, 2), 0.01), torch.full((3, 2), 1.3), [50] * 2, {}
    )
    assert doubts == ((None, None), (None, None))


# -- the index: rows that fail the checks are left out, a doubted neighbour is marked -------------------------------


def test_index_show_and_select_index(world, hub, hf_api, hf_hub_cache, tmp_path, capsys):
    from fisherhub.hub import push_signature
    from fisherhub.hub.signature_index import build_index
    from fisherhub.testing.hub_repos import create_adapter

    tampered = {
        "org/forged-norms": Signature.from_bytes(CASES["split norms x 1e-3"].forge(world)),
        "org/forged-joint": Signature.from_bytes(CASES["joint values x 2.5, a near pair"].forge(world)),
    }
    for repo, signature in {"org/near": world["near"], **tampered}.items():
        push_signature(signature, create_adapter(hf_api, repo, BASE))
    build_index(BASE, "datasets/tester/index", work=tmp_path / "work")
    assert main(["index", "show", "tester/index"]) == 0
    out = capsys.readouterr().out
    assert "1 row(s) left out" in out and "org/forged-norms:" in out and SELF_DOMINANCE in out
    [line] = [line for line in out.splitlines() if line.startswith("  org/forged-joint (")]
    assert line.endswith(" !") and "nearest org/near" in line, line
    assert "! org/forged-joint and org/near: implausible alignment: fisher = " in out and ALIGNMENT_RANGE in out

    target = tmp_path / "target.safetensors"
    world["target"].save(target)
    assert main(["select", str(target), "--index", "tester/index", "--wide"]) == 0  # one line per row and reason
    out = capsys.readouterr().out
    assert "org/forged-norms:" in out and "index row: implausible split norms" in out  # skipped, with its reason
    rows = [line for line in out.splitlines() if line[:1].isdigit()]
    assert rows[-1].startswith("2 !") and "org/forged-joint@" in rows[-1], out
    assert out.splitlines()[-1].startswith("best: org/near@")


def test_an_index_neighbour_is_a_plausible_one_where_there_is_one(world):
    """Of a row's others, the nearest plausible one is its neighbour; a doubted A is shown (marked) only when no
    other is left."""
    from fisherhub.hub.refs import SIGNATURE_FOLDER, SignatureRef
    from fisherhub.hub.signature_index import Layout, nearest_neighbours, read_rows, row_schema, signature_row

    import pyarrow as pa

    signatures = {
        "near": world["near"],
        "far": world["far"],
        "forged": Signature.from_bytes(CASES["joint values x 2.5, a near pair"].forge(world)),
    }
    rows = [
        signature_row(
            signature,
            SignatureRef(f"org/{name}", "model", "a" * 40, f"{SIGNATURE_FOLDER}/s.safetensors"),
            "published",
            Layout(),
        )
        for name, signature in signatures.items()
    ]
    read = read_rows(pa.Table.from_pylist(rows, schema=row_schema()), BASE, "test")
    found = {
        read.rows[i]["repo_id"]: (read.rows[j]["repo_id"], a, doubt) for i, j, a, doubt in nearest_neighbours(read, 10)
    }
    assert found["org/near"][0] == "org/far" and found["org/near"][2] is None  # not the forged one, A ≈ 2
    assert found["org/forged"][0] == "org/far" and found["org/forged"][2] is None
    near_forged = [n for n in nearest_neighbours(read, 10) if n[2] > 1.5]
    assert near_forged == []
