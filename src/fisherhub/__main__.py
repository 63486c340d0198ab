"""``python -m fisherhub COMMAND ...``: the ``fisherhub`` command line, also under a launcher.

accelerate launch [launch options] -m fisherhub sketch --dataset DATA --output sig.safetensors
"""

import sys

from fisherhub.cli import main

if __name__ == "__main__":
    sys.exit(main())
