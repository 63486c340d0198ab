"""``.ci/run`` runs the README's test command: every step of it (the set-up's pip installs and pytest with its
flags), so that what passes CI is what a newcomer runs."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def readme_test_command() -> list[str]:
    """The steps (split at ``&&``) of the README's second command, environment assignments dropped."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("Set up and run the tests") :]
    command = re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)
    return [re.sub(r"^(\w+=\S+ )+", "", step.strip()) for step in command.split("&&")]


def test_ci_runs_every_step_of_the_readme_test_command():
    steps = readme_test_command()
    assert any(step.startswith("python -m pytest") for step in steps) and len(steps) >= 3
    ci_lines = {line.split("||")[0].strip() for line in (REPO / ".ci" / "run").read_text().splitlines()}
    for step in steps:
        ci_form = re.sub(r"^pip install", "pip install -q", step)
        assert ci_form in ci_lines, f".ci/run does not run the README's step {step!r}"
