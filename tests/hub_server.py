"""Shim until the parallel branches of issue 22 are merged: import ``fisherhub.testing.hub_server`` instead."""

from fisherhub.testing.hub_server import *  # noqa: F401,F403
