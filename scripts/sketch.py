"""Sketch a dataset into a FisherSketch signature; same options as ``fisherhub sketch``.

python scripts/sketch.py --dataset DATA --output sig.safetensors
accelerate launch --num_processes N scripts/sketch.py --dataset DATA --output sig.safetensors
"""

import sys

from fisherhub.cli.commands.sketch import main

if __name__ == "__main__":
    sys.exit(main())
