"""Sketch a dataset into a FisherSketch signature; same options as ``fisherhub sketch``.

One process:
    python scripts/sketch.py --dataset DATA --output sig.safetensors
N processes on the CPU (``--multi_gpu`` is what makes accelerate start N processes with a process group there):
    accelerate launch --multi_gpu --num_processes N --num_machines 1 --mixed_precision no --dynamo_backend no \
        --main_process_port 0 scripts/sketch.py --cpu --dataset DATA --output sig.safetensors
N GPUs of one machine (one process per GPU; accelerate starts N only when the machine has at least 2 GPUs):
    accelerate launch --num_processes N scripts/sketch.py --dataset DATA --output sig.safetensors
A launch that starts fewer processes than it was asked for warns, naming both numbers. docs/distributed.md.
"""

import sys

from fisherhub.cli.commands.sketch import main

if __name__ == "__main__":
    sys.exit(main())
