"""The signature index Space: the index the Space variable FISHERHUB_INDEX names, else the one index_space.json
names (written by `fisherhub index space INDEX --push spaces/ORG/NAME`). The page is fisherhub's
(`fisherhub.space.index_app`); run it here with `fisherhub index space INDEX --serve`."""

from pathlib import Path

from fisherhub.space.index_app import build_index_app
from fisherhub.space.publish import space_index
from fisherhub.space.ui import launch

demo = build_index_app(space_index(Path(__file__).parent))

if __name__ == "__main__":
    launch(demo)
