"""What the Spaces' pages share: Gradio imported as the optional ``[space]`` extra, and serving a page with
nothing but its own server contacted (no share link, no analytics, no server-side rendering)."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from fisherhub.extras import require


def gradio() -> ModuleType:
    """``import gradio`` (the ``[space]`` extra), its usage analytics off."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    return require("gradio")


def launch(demo: Any, *, host: str | None = None, port: int | None = None, block: bool = True) -> Any:
    """Serve ``demo`` on ``host``:``port`` (default Gradio's: ``GRADIO_SERVER_NAME``, ``GRADIO_SERVER_PORT``, else
    127.0.0.1:7860); ``block``: until interrupted."""
    return demo.launch(
        server_name=host, server_port=port, share=False, ssr_mode=False, prevent_thread_lock=not block, quiet=True
    )
