"""The fisher_alignment Space: evaluate's Gradio widget over the metric module next to this file."""

from pathlib import Path

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load(str(Path(__file__).with_name("fisher_alignment.py")))
launch_gradio_widget(module)
