"""The Spaces' logic without a browser (``fisherhub.space``): an index's rows, filters, a row's neighbours (those
of ``rank_nearest``), a target's ranking (that of ``select_adapter(target, index=...)``), the messages for bad
uploads, what a repo published shown as text, the Spaces' files pushed in one commit, the index a Space reads,
the Space apps' own files. Gradio is imported only when a page is built (``test_cli_startup.py``,
``test_packaging.py``); the pages in a real browser: ``test_space_browser.py``."""

from __future__ import annotations

import dataclasses
import json
import re
import runpy
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_hub import set_files

from fisherhub.analysis.nearest import rank_nearest
from fisherhub.cli import main
from fisherhub.core.errors import InputError
from fisherhub.hub.refs import SignatureRef
from fisherhub.hub.signature_index import Layout, LoadedIndex, load_index, read_rows, row_schema, signature_row
from fisherhub.selection import select_adapter
from fisherhub.core.signature import CLAMPED_NORMS_KEY
from fisherhub.space.browse import NEIGHBOURS, UNKNOWN_LICENSE, Filters, IndexBrowser, Neighbourhood, row_flags
from fisherhub.space.index_view import ranking, row_details
from fisherhub.space.publish import INDEX_VARIABLE, SETTINGS_FILE, card_folder, space_index
from fisherhub.space.text import escape, hub_url
from fisherhub.testing.index_world import LICENSES, publish_index_world, topic_signature

REPO = Path(__file__).resolve().parents[1]
BASE = "org/base"
INDEX = "datasets/tester/space-index"


@pytest.fixture
def world(hub, hf_api, hf_hub_cache, tmp_path):
    return publish_index_world(hf_api, BASE, INDEX, 12, tmp_path / "work")


def test_rows_filters_neighbours_and_a_target_ranked_as_select_adapter_ranks_it(world, tmp_path):
    browser = IndexBrowser.open(INDEX)
    assert len(browser.rows) == 12 and browser.base_model == BASE
    everything = browser.select(Filters())
    assert sorted(browser.views[i].repo_id for i in everything) == sorted(world)
    assert [browser.views[i].tokens for i in everything] == sorted((200 + 10 * k for k in range(12)), reverse=True)
    table = browser.table(everything)
    assert len(table) == 12 and all(len(row) == len(IndexBrowser.COLUMNS) for row in table)
    assert table[0][0] == f"[org/legal\\-lora\\-11]({hub_url('model', 'org/legal-lora-11')})"
    assert {row[5] for row in table} == {"the repo's own"} and {row[6] for row in table} == {"no"}
    # filters: license, task words (from the tags and the dataset's name), the search box, the base model
    choices = browser.choices()
    assert sorted(choices["license"]) == sorted(LICENSES) and {"code", "math", "chat", "legal"} <= set(
        choices["task_words"]
    )
    assert len(browser.select(Filters(license="mit"))) == 4
    assert {browser.views[i].repo_id for i in browser.select(Filters(task_words=("math",)))} == {
        "org/math-lora-01",
        "org/math-lora-05",
        "org/math-lora-09",
    }
    assert browser.select(Filters(task_words=("math",), license="mit")) == browser.select(Filters(search="LORA-01"))
    assert (
        browser.select(Filters(base_model="org/elsewhere")) == []
        and len(browser.select(Filters(base_model=BASE))) == 12
    )
    # a row's neighbours: rank_nearest over the other rows' own signature files, with the verdict
    row = everything[0]
    hood = browser.neighbours(row)
    others = {browser.row_name(j): browser.signature(j) for j in range(12) if j != row}
    expected = rank_nearest(browser.signature(row), others, limit=NEIGHBOURS)
    assert [(n.name, n.alignment) for n in hood.neighbours] == [(n.name, n.alignment) for n in expected]
    assert hood.verdict is not None and hood.verdict.message and not hood.unreadable
    details = row_details(browser, hood)
    first = expected[0].alignment
    assert f"{first.fisher:.3f} ± {first.stderr:.3f}" in details and "**Verdict**" in details
    assert "signature file" in details and hub_url("dataset", "org/legal-data-11", f"{11:040x}") in details
    for url in re.findall(r"\]\((http[^)]+)\)", details):  # every link leads to a page of the Hub the app reads
        if "legal-data" in url:  # the row's dataset: named in its signature, never created on this Hub
            continue
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200 and "org/" in answer.read().decode()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(hub_url("model", "org/legal-lora-11", "main", "no/such/file"), timeout=30)
    assert missing.value.code == 404
    # a target uploaded: the very ranking select_adapter gives from the index
    target = topic_signature(BASE, "code", seed=99, tokens=300, dataset="me/private-data")
    target.save(tmp_path / "mine.safetensors")
    selection = browser.rank_target(tmp_path / "mine.safetensors", "mine.safetensors")
    assert selection.table() == select_adapter(target, index=INDEX).table()
    shown = ranking(selection, target, "mine.safetensors")
    assert selection.best.candidate.split("@")[0] in shown and "me/private" not in shown and str(tmp_path) not in shown
    assert f"{selection.best.score:.3f} ± {selection.best.stderr:.3f}" in shown and "**Verdict**" in shown


def test_a_bad_upload_is_refused_with_a_message_that_names_the_file_not_its_path(world, tmp_path):
    browser = IndexBrowser.open(INDEX)
    good = topic_signature(BASE, "math", seed=77)
    files = {
        "notes.safetensors": b"not a signature at all",
        "other.safetensors": topic_signature("org/other-base", "math", seed=77).to_bytes(),
        "forged.safetensors": dataclasses.replace(good, split_norms=good.split_norms * 1e-3).to_bytes(),
        "small.safetensors": topic_signature(BASE, "math", seed=77, m=128).to_bytes(),
    }
    expected = {
        "notes.safetensors": "notes.safetensors is not a fisherhub signature: ",
        "other.safetensors": "other.safetensors is a signature of 'org/other-base', not of 'org/base'",
        "forged.safetensors": "forged.safetensors is implausible, its alignments cannot be trusted: implausible split",
        "small.safetensors": "small.safetensors cannot be ranked against this index: ",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError) as error:
            browser.rank_target(tmp_path / name, name)
        assert str(error.value).startswith(expected[name]) and str(tmp_path) not in str(error.value), str(error.value)


def _browser_of(rows: list[dict]) -> IndexBrowser:
    import pyarrow as pa

    table = pa.Table.from_pylist(rows, schema=row_schema())
    ref = SignatureRef("tester/hostile-index", "dataset")
    loaded = LoadedIndex(ref, "a" * 40, {"base_model": BASE, "repos": []}, table)
    return IndexBrowser(loaded, read_rows(table, BASE, "test"))


def test_what_a_repo_published_shows_as_text_never_as_markup_or_a_link():
    hostile = "[click](http://evil.example) <img src=x onerror=alert(1)> **bold** | cell"
    signature = topic_signature(BASE, "chat", seed=5, dataset=hostile)
    card = {"license": "<b>mit</b>", "tags": ["chat", "<script>x</script>"]}
    ref = SignatureRef("org/adapter", "model", "b" * 40, ".fisher_signatures/x.safetensors")
    browser = _browser_of([signature_row(signature, ref, "published", Layout(), card)])
    view = browser.views[0]
    assert view.dataset == hostile and view.license == "<b>mit</b>" and "script" in view.words
    assert escape(hostile) == (
        "\\[click\\]\\(http\\://evil\\.example\\) \\<img src\\=x onerror\\=alert\\(1\\)\\> \\*\\*bold\\*\\* \\| cell"
    )
    details = row_details(browser, Neighbourhood(0, [], {}, None, []))
    unescaped = re.compile(r"(?<!\\)(<img|<b>|\]\(http://evil|\*\*bold)")
    cells = browser.table([0])[0]  # the repo link is Markdown; the other columns are plain text (datatype "str")
    assert not unescaped.search(details) and not unescaped.search(cells[0]) and cells[3] == hostile
    assert "dataset [" not in details  # a dataset that is no Hub id gets no link
    assert hub_url("model", "org/we ird(1)") == f"{hub_url('model', 'org/x')[: -len('org/x')]}org/we%20ird%281%29"


def test_an_index_built_before_licenses_and_tags_were_recorded_still_reads(world):
    loaded = load_index(INDEX)
    older = loaded.table.drop_columns(["license", "tags"])
    rows = read_rows(older, BASE, "an older index")
    assert len(rows) == 12 and {row["license"] for row in rows.rows} == {None}
    browser = IndexBrowser(dataclasses.replace(loaded, table=older), rows)
    assert {view.license for view in browser.views} == {UNKNOWN_LICENSE} and browser.choices()["license"] == [
        UNKNOWN_LICENSE
    ]


def test_the_index_space_is_pushed_in_one_commit_and_only_with_the_flag(world, hub, capsys):
    assert main(["index", "space", INDEX]) == 0
    assert "nothing pushed" in capsys.readouterr().out and ("space", "tester/browse") not in hub.repos
    assert main(["index", "space", INDEX, "--push", "spaces/tester/browse"]) == 0
    assert hub.commit_count("tester/browse", "space") == 2  # the Hub's initial commit, then ours
    files = hub.files("tester/browse", "space")
    assert {"README.md", "app.py", "requirements.txt", SETTINGS_FILE} <= set(files)
    assert json.loads(files[SETTINGS_FILE]) == {"index": INDEX}
    card = files["README.md"].decode()
    assert "sdk: gradio" in card and "- tester/space-index" in card and "{{" not in card and "org/base" in card
    assert files["app.py"] == (card_folder("index_space") / "app.py").read_bytes()
    assert main(["index", "space", INDEX, "--push", "spaces/tester/browse"]) == 0  # the same files: no commit
    assert hub.commit_count("tester/browse", "space") == 2 and "already holds" in capsys.readouterr().out
    set_files(hub, "tester/browse", "space", {"app.py": b"print('edited on the Hub')\n"})
    assert main(["index", "space", INDEX, "--push", "spaces/tester/browse"]) == 0  # an update: one commit more
    assert (
        hub.commit_count("tester/browse", "space") == 4
        and hub.files("tester/browse", "space")["app.py"] == files["app.py"]
    )
    assert main(["index", "space", INDEX, "--push", "tester/browse"]) == 1
    assert "a Space is named spaces/ORG/NAME" in capsys.readouterr().err
    assert main(["index", "space", "tester/no-such-index", "--push", "spaces/tester/other"]) == 1
    assert ("space", "tester/other") not in hub.repos


def test_the_metric_space_is_pushed_the_same_way(hub, capsys):
    assert main(["metric-space", "--push", "spaces/tester/fisher_alignment"]) == 0
    files = hub.files("tester/fisher_alignment", "space")
    assert {"README.md", "app.py", "requirements.txt", "fisher_alignment.py"} <= set(files)
    assert b"launch_gradio_widget" not in files["app.py"] and b"sdk_version: 6.31.0" in files["README.md"]
    assert main(["metric-space", "--push", "spaces/tester/metric"]) == 1
    assert "is named fisher_alignment" in capsys.readouterr().err and ("space", "tester/metric") not in hub.repos


def test_a_space_reads_the_index_its_variable_names_else_its_settings_file(tmp_path, monkeypatch):
    monkeypatch.delenv(INDEX_VARIABLE, raising=False)
    with pytest.raises(InputError, match=INDEX_VARIABLE):
        space_index(tmp_path)
    (tmp_path / SETTINGS_FILE).write_text(json.dumps({"index": "datasets/org/from-file"}))
    assert space_index(tmp_path) == "datasets/org/from-file"
    monkeypatch.setenv(INDEX_VARIABLE, "datasets/org/from-variable")
    assert space_index(tmp_path) == "datasets/org/from-variable"


def test_the_spaces_pin_fisherhub_and_the_gradio_they_were_tested_with():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    gradio = next(line for line in project["optional-dependencies"]["space"] if line.startswith("gradio"))
    for name in ("index_space", "evaluate_space"):
        folder = card_folder(name)
        assert f"fisherhub[space]=={project['version']}" in (folder / "requirements.txt").read_text().split()
        assert f"sdk_version: {gradio.removeprefix('gradio>=')}\n" in (folder / "README.md").read_text()
        assert "app_file: app.py\n" in (folder / "README.md").read_text()


def test_the_space_apps_build_their_pages(world, monkeypatch):
    """The Spaces' own app files, as a Space runs them (less the launch): each builds its page."""
    import gradio

    monkeypatch.setenv(INDEX_VARIABLE, INDEX)
    for name in ("index_space", "evaluate_space"):
        namespace = runpy.run_path(str(card_folder(name) / "app.py"), run_name="space_app")
        assert isinstance(namespace["demo"], gradio.Blocks), name


def test_a_row_is_flagged_for_what_makes_its_numbers_doubtful():
    row = {"num_documents": 5, "sketch_id": "other", "file_repo": "org/index"}
    metadata = {"source": "generated", CLAMPED_NORMS_KEY: "joint", "base_model": BASE, "dataset": "local.jsonl"}
    flags = row_flags(row, metadata, "common")
    assert [flag.split(" ")[0] for flag in flags] == [
        "unresolved",
        "5",
        "sketched",
        "signed",
        "unverifiable:",
        "sketch",
    ]
    assert (
        row_flags(
            {"num_documents": 500, "sketch_id": "common"},
            {"base_model": BASE, "dataset": "org/d", "dataset_revision": "r"},
            "common",
        )
        == ()
    )
