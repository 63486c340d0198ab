"""The CLI's allocator setting: sketch updates in steady state reuse freed memory instead of page-faulting."""

import subprocess
import sys

from fisherhub.cli.allocator import keep_freed_memory

STEADY_STATE_FAULTS = """
import resource, sys, torch
from fisherhub.cli.allocator import keep_freed_memory
from fisherhub.core.batch import HeadBatch
from fisherhub.core.spec import SketchSpec
from fisherhub.core.state import SketchState
if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.set_num_threads(1)
n, k, d = 512, 16384, 128  # a CLI-sized batch: smaller ones can fit glibc's adaptive mmap threshold
generator = torch.Generator().manual_seed(0)
logits, activations = torch.randn(n, k, generator=generator), torch.randn(n, d, generator=generator)
targets, documents = torch.randint(0, k, (n,), generator=generator), torch.arange(n) // 16
state = SketchState(SketchSpec(d=d, vocab_size=k, m=2048))
faults = []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    state.update(HeadBatch(activations=activations, doc_index=documents, logits=logits, targets=targets))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(min(faults[-5:]))
"""


def _steady_state_faults(mode: str) -> int:
    """The fewest minor page faults of the last 5 of 8 identical updates, in a fresh process (the fewest, so
    that a page the kernel reclaims now and then does not count)."""
    result = subprocess.run(
        [sys.executable, "-c", STEADY_STATE_FAULTS, mode], capture_output=True, text=True, check=True, timeout=300
    )
    return int(result.stdout.strip().splitlines()[-1])


def test_sketch_updates_reuse_freed_memory():
    if not sys.platform.startswith("linux"):
        assert keep_freed_memory() is False
        return
    # glibc's defaults (as in this image): the update's temporaries page-fault on every update
    assert _steady_state_faults("default") > 250
    assert _steady_state_faults("keep") < 25
