"""The metric Space's page (Gradio): two signature uploads, then A, S_a, S_e and ρ with their error bars and
flags (``space.metric_view``), and what the ``fisher_alignment`` module's ``compute`` returns for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fisherhub.core.errors import FisherHubError
from fisherhub.space.metric_view import compare_files
from fisherhub.space.text import escape
from fisherhub.space.ui import gradio

INTRO = """## Fisher alignment

Upload two signatures (`.safetensors` files made by `fisherhub sketch`, under the same base model): the source
task and the target task. **A** is the Fisher alignment of the two tasks (how much fine-tuning on the source moves
the model's output head the way the target needs), split into **S_a** (their activations), **S_e** (the errors:
what the model is asked to predict) and **ρ** = A / (S_a S_e), each ± its standard error.

```python
import evaluate

fisher_alignment = evaluate.load("ORG/fisher_alignment")  # this Space
fisher_alignment.compute(predictions=["source.safetensors"], references=["target.safetensors"])
```"""


def build_metric_app(module: Any) -> Any:
    """The page over the ``evaluate`` module ``module`` (``evaluate.load`` of ``fisher_alignment.py``)."""
    gr = gradio()

    def compare(source, target):
        if source is None or target is None:
            return "Upload a source and a target signature.", ""
        names = (Path(source).name, Path(target).name)
        try:
            comparison = compare_files(module, (source, target), names)
        except FisherHubError as exc:
            return f"⚠ **{escape(exc)}**", ""
        return comparison.markdown(), comparison.output_json()

    with gr.Blocks(title="Fisher alignment", analytics_enabled=False) as demo:
        gr.Markdown(INTRO)
        with gr.Row():
            source = gr.File(
                label="Source signature (.safetensors)", file_types=[".safetensors"], elem_id="source-upload"
            )
            target = gr.File(
                label="Target signature (.safetensors)", file_types=[".safetensors"], elem_id="target-upload"
            )
        button = gr.Button("Compare", variant="primary", elem_id="compare")
        result = gr.Markdown(elem_id="result")
        output = gr.Code(language="json", label="what compute() returns", interactive=False, elem_id="metric-output")
        button.click(compare, [source, target], [result, output])
    return demo
