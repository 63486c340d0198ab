"""The fisher_alignment Space: two signature uploads compared by the metric module next to this file, with
their error bars and flags (the page is fisherhub's, `fisherhub.space.metric_app`); run it here with
`fisherhub metric-space --serve`."""

from pathlib import Path

import evaluate

from fisherhub.space.metric_app import build_metric_app
from fisherhub.space.ui import launch

demo = build_metric_app(evaluate.load(str(Path(__file__).with_name("fisher_alignment.py"))))

if __name__ == "__main__":
    launch(demo)
