"""Shim until the parallel branches of issue 22 are merged: import ``fisherhub.testing.oracles`` instead."""

from fisherhub.testing.oracles import *  # noqa: F401,F403
