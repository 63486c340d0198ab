"""The CLI's allocator setting: sketch updates in steady state reuse freed memory instead of page-faulting."""

import subprocess
import sys

from fisherhub.cli.support.allocator import keep_freed_memory

STEADY_STATE_FAULTS = """
import resource, sys, torch
from fisherhub.cli.support.allocator import keep_freed_memory, set_malloc_thresholds
from fisherhub.core.batch import HeadBatch
from fisherhub.core.spec import SketchSpec
from fisherhub.core.state import SketchState
if sys.argv[1] == "keep":
    assert keep_freed_memory()
elif sys.argv[1] == "give-back":  # every block above 128 KiB mapped afresh and unmapped when freed
    assert set_malloc_thresholds(mmap_threshold=128 * 2**10, trim_threshold=0)
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
    """What the project sets, against a setting that gives every freed block back: glibc's own defaults are left
    out, since whether they page-fault depends on the machine and the process's history (adaptive thresholds)."""
    if not sys.platform.startswith("linux"):
        assert keep_freed_memory() is False
        return
    # the measurement sees the faults of temporaries mapped afresh each update (8 MiB of logits alone: 2,048 pages)
    assert _steady_state_faults("give-back") > 250
    assert _steady_state_faults("keep") < 25
