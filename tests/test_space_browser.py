"""The Spaces' pages in a real browser: ``fisherhub index space INDEX --serve`` and ``fisherhub metric-space
--serve`` started on a free port of 127.0.0.1 against the local Hub server, driven with Playwright through the
system's Chromium (``apt-get install -y chromium``; skipped, saying so, only when it is missing). Every request the
page makes stays on 127.0.0.1 (any other is refused and fails the test); a screenshot of each page is written
under the test's ``tmp_path`` (the paths are printed: ``pytest -s`` shows them)."""

from __future__ import annotations

import json
import os
import re
import urllib.request

import playwright.sync_api  # noqa: F401  (the test extra: missing, the test fails; only Chromium may be missing)
import pytest

from fisherhub import alignment
from fisherhub.analysis.nearest import rank_nearest
from fisherhub.hub import load_signature, push_signature
from fisherhub.hub.signature_index import update_index
from fisherhub.selection import select_adapter
from fisherhub.space.text import with_error
from fisherhub.testing.browser import (
    MISSING_CHROMIUM,
    VIEWPORT,
    chromium,
    free_port,
    serve_command,
    served,
    wait_for_text,
)
from fisherhub.testing.hub_repos import create_adapter
from fisherhub.testing.index_world import publish_index_world, topic_signature

pytestmark = pytest.mark.skipif(MISSING_CHROMIUM is not None, reason=str(MISSING_CHROMIUM))

BASE = "org/base"
INDEX = "datasets/tester/browser-index"
ADAPTERS = 36


def rows_shown(page) -> int:
    """The rows of the index table (its grid's row count, less the header row)."""
    return int(page.locator("#rows [role=grid]").get_attribute("aria-rowcount")) - 1


def choose(page, dropdown: str, option: str) -> None:
    page.locator(f"{dropdown} input").click()
    page.locator(f'{dropdown} li[aria-label="{option}"]').click()


def table_rows(page, selector: str) -> list[list[str]]:
    """The cells of a Markdown table the page shows, row by row."""
    rows = page.locator(f"{selector} table tbody tr")
    return [[cell.strip() for cell in rows.nth(i).locator("td").all_inner_texts()] for i in range(rows.count())]


def shot(page, path) -> None:
    page.screenshot(path=path, full_page=True)
    print(f"screenshot: {path}")


def check_page(browsing, tmp_path) -> None:
    """Nothing left 127.0.0.1; no local path or token on the page; nothing wider than the laptop screen."""
    page = browsing.page
    assert not browsing.refused, browsing.refused
    text = page.locator("body").inner_text()
    assert str(tmp_path) not in text and "/tmp/" not in text and os.environ["HF_TOKEN"] not in text
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]


@pytest.fixture
def world(hub, hf_api, hf_hub_cache, tmp_path):
    return publish_index_world(hf_api, BASE, INDEX, ADAPTERS, tmp_path / "work")


def test_the_index_space_in_chromium(world, hub, hf_api, tmp_path):
    target = topic_signature(BASE, "code", seed=99, shift=1, tokens=300, dataset="me/my-data")
    target.save(tmp_path / "my-target.safetensors")
    (tmp_path / "notes.safetensors").write_bytes(b"these are my notes, not a signature")
    topic_signature("org/other-base", "code", seed=98).save(tmp_path / "other-base.safetensors")
    port = free_port()
    command = serve_command("index", "space", INDEX, "--serve", "--port", str(port))
    with served(command, port, tmp_path / "index-space.log") as url, chromium() as browsing:
        page = browsing.page
        page.goto(url)
        wait_for_text(page, "#status", f"of {ADAPTERS} shown")
        assert rows_shown(page) == ADAPTERS
        assert f"{ADAPTERS} signatures of {ADAPTERS} repos" in page.locator("#header").inner_text()
        shot(page, tmp_path / "index-page.png")

        # the filters narrow the table: the search box, then the license
        page.locator("#search textarea, #search input").first.fill("math")
        wait_for_text(page, "#status", "of 9 shown")
        assert rows_shown(page) == 9
        page.locator("#search textarea, #search input").first.fill("")
        wait_for_text(page, "#status", f"of {ADAPTERS} shown")
        choose(page, "#license", "mit")
        wait_for_text(page, "#status", "of 12 shown")
        assert rows_shown(page) == 12

        # a row's neighbours: rank_nearest over every other adapter's signature
        chosen = page.locator('#rows [data-testid="cell-0-0"]').inner_text().strip()
        page.locator('#rows [data-testid="cell-0-1"]').click()
        wait_for_text(page, "#row-details", "Verdict")
        signatures = {repo: load_signature(repo) for repo in world}
        others = {repo: signature for repo, signature in signatures.items() if repo != chosen}
        expected = rank_nearest(signatures[chosen], others, limit=10)
        shown = table_rows(page, "#row-details")
        assert [row[1] for row in shown] == [n.name for n in expected]
        assert [row[2] for row in shown] == [with_error(n.alignment.fisher, n.alignment.stderr) for n in expected]
        # its links go to the Hub the page reads, and answer there
        for link in (
            page.locator("#row-details a", has_text=f"adapter {chosen}"),
            page.locator("#row-details a", has_text="signature file"),
            page.locator("#rows a").first,
        ):
            href = link.get_attribute("href")
            assert href.startswith(hub.endpoint + "/"), href
            with urllib.request.urlopen(href, timeout=30) as answer:
                assert answer.status == 200 and answer.read().decode().count("org/") > 0
        assert chosen in page.locator("#row-snippet").inner_text()
        shot(page, tmp_path / "index-row.png")

        # a target uploaded: the ranking select_adapter gives, in its order
        page.get_by_role("tab", name="Rank your target").click()
        page.locator("#target-upload input[type=file]").set_input_files(tmp_path / "my-target.safetensors")
        wait_for_text(page, "#target-ranking", "Verdict")
        selection = select_adapter(target, index=INDEX)
        ranked = table_rows(page, "#target-ranking")
        assert [row[1] for row in ranked] == [row.candidate.split("@")[0] for row in selection.ranking]
        assert ranked[0][2] == with_error(selection.best.score, selection.best.stderr)
        assert "select_adapter" in page.locator("#target-snippet").inner_text()
        shot(page, tmp_path / "index-target.png")

        # bad uploads: each says what is wrong, naming the file
        messages = {
            "notes.safetensors": "notes.safetensors is not a fisherhub signature",
            "other-base.safetensors": "other-base.safetensors is a signature of 'org/other-base', not of 'org/base'",
        }
        for name, message in messages.items():
            page.locator("#target-upload button[aria-label='Clear']").click()
            page.locator("#target-upload input[type=file]").set_input_files(tmp_path / name)
            wait_for_text(page, "#target-ranking", message)
        shot(page, tmp_path / "index-bad-upload.png")
        check_page(browsing, tmp_path)

        # the index moves on (one adapter more): the next visit shows its new commit's rows
        repo_id = create_adapter(hf_api, "org/late-lora", BASE, card={"license": "mit"})
        push_signature(topic_signature(BASE, "math", seed=500, dataset="org/late-data"), repo_id)
        update_index(INDEX, work=tmp_path / "update")
        page.reload()
        wait_for_text(page, "#status", f"of {ADAPTERS + 1} shown")
        assert rows_shown(page) == ADAPTERS + 1
        page.locator("#search textarea, #search input").first.fill("late")
        wait_for_text(page, "#status", "of 1 shown")
        assert page.locator('#rows [data-testid="cell-0-0"]').inner_text().strip() == "org/late-lora"


def test_the_metric_space_in_chromium(hub, hf_hub_cache, tmp_path):
    import evaluate

    from fisherhub.metric import metric_path

    source = topic_signature(BASE, "code", seed=1, tokens=400)
    target = topic_signature(BASE, "code", seed=2, shift=2, tokens=300)
    source.save(tmp_path / "source.safetensors")
    target.save(tmp_path / "target.safetensors")
    port = free_port()
    with (
        served(serve_command("metric-space", "--serve", "--port", str(port)), port, tmp_path / "metric.log") as url,
        chromium() as browsing,
    ):
        page = browsing.page
        page.goto(url)
        for side in ("source", "target"):
            page.locator(f"#{side}-upload input[type=file]").set_input_files(tmp_path / f"{side}.safetensors")
            wait_for_text(page, f"#{side}-upload", f"{side}.safetensors")
        page.locator("#compare").click()
        shown = wait_for_text(page, "#result", "sketch id")
        result = alignment(source, target)
        (values,) = table_rows(page, "#result")
        assert values == [
            with_error(result.fisher, result.stderr),
            with_error(result.activation, result.activation_stderr),
            with_error(result.error, result.error_stderr),
            with_error(result.coupling, result.coupling_stderr),
        ]
        assert "source.safetensors" in shown and "target.safetensors" in shown
        output = page.locator("#metric-output").inner_text()
        computed = evaluate.load(metric_path()).compute(
            predictions=[str(tmp_path / "source.safetensors")], references=[str(tmp_path / "target.safetensors")]
        )
        assert computed["fisher_alignment"] == [result.fisher]
        assert re.search(rf'"fisher_alignment": \[\s*{re.escape(json.dumps(result.fisher))}\s*\]', output), output
        shot(page, tmp_path / "metric-page.png")
        check_page(browsing, tmp_path)
