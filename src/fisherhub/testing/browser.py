"""Pages driven in a real browser, for the Spaces' tests and benchmark: a page's server started as a command on a
free loopback port, and the system's Chromium (``apt-get install -y chromium``; Playwright drives it, no browser
is downloaded) opening it with every request that leaves 127.0.0.1 refused and counted.

Waiting is on what the page shows (``wait_for_text``), never on a fixed sleep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: why a browser test cannot run here, or None when it can
MISSING_CHROMIUM = (
    None
    if shutil.which("chromium")
    else "the system's Chromium is not installed: apt-get install -y chromium (Playwright drives it; no browser "
    "is downloaded)"
)
#: a laptop screen
VIEWPORT = {"width": 1366, "height": 768}


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PageServer:
    """A page's server started as ``command`` (on 127.0.0.1:``port``; output to ``log``), in its own process."""

    def __init__(self, command: list[str], port: int, log: Path, *, env: dict[str, str] | None = None):
        self.url, self.log = f"http://127.0.0.1:{port}/", log
        environment = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})}
        with open(log, "w", encoding="utf-8") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment)

    def wait(self, timeout: float = 180.0) -> str:
        """The page's URL, once it answers 200."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the page's server exited with {self.process.returncode}: {self.log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.url} did not answer within {timeout:.0f} s: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=5) as answer:
                    if answer.status == 200:
                        return self.url
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)

    def stop(self) -> None:
        """End the server's process (its own only)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def served(command: list[str], port: int, log: Path, *, env: dict[str, str] | None = None, timeout: float = 180.0):
    """``PageServer(command, port, log)`` until its page answers; yield its URL; then stop it."""
    server = PageServer(command, port, log, env=env)
    try:
        yield server.wait(timeout)
    finally:
        server.stop()


def serve_command(*arguments: str) -> list[str]:
    """``python -m fisherhub ARGUMENTS`` with this interpreter."""
    return [sys.executable, "-m", "fisherhub", *arguments]


@dataclasses.dataclass
class Browsing:
    """A page in Chromium: ``page`` (Playwright's), the hosts it asked for, and the requests refused because
    they left 127.0.0.1."""

    page: Any
    hosts: set[str]
    refused: list[str]


@contextlib.contextmanager
def chromium(viewport: dict[str, int] | None = None) -> Iterator[Browsing]:
    """The system's Chromium (headless, ``--no-sandbox``: tests run as root), a page of ``viewport`` (default
    ``VIEWPORT``); a request of any page of its context to any host but 127.0.0.1 is refused and recorded."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        try:
            size = viewport or VIEWPORT
            context = browser.new_context(viewport={"width": size["width"], "height": size["height"]})
            browsing = Browsing(context.new_page(), set(), [])

            def route(request_route):
                url = request_route.request.url
                host = urlsplit(url).hostname or ""
                browsing.hosts.add(host)
                if host == "127.0.0.1" or url.startswith(("data:", "blob:")):
                    request_route.continue_()
                else:
                    browsing.refused.append(url)
                    request_route.abort()

            context.route("**/*", route)  # every page of the context (``page.context.new_page()``)
            yield browsing
        finally:
            browser.close()


def wait_for_text(page: Any, selector: str, *texts: str, timeout: float = 60.0) -> str:
    """The text of ``selector`` once it contains one of ``texts`` (``TimeoutError`` with what it showed)."""
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        locator = page.locator(selector)
        shown = locator.inner_text() if locator.count() else ""
        if any(text in shown for text in texts):
            return shown
        page.wait_for_timeout(50)
    raise TimeoutError(f"{selector} never showed {texts!r} within {timeout:.0f} s; it showed {shown[-2000:]!r}")
