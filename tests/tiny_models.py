"""Shim until the parallel branches of issue 22 are merged: import ``fisherhub.testing.tiny_models`` instead."""

from fisherhub.testing.tiny_models import *  # noqa: F401,F403
from fisherhub.testing.tiny_models import ALPHABET, SPECIAL_TOKENS  # noqa: F401
