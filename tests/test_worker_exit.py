"""A rank that succeeded leaves through `exit_now` (see ddpbench/worker/teardown.py): past the
interpreter's finalization, yet with its exit handlers run, its output flushed and its code kept."""

import subprocess
import sys

from conftest import REPO

PROGRAM = """
import atexit, sys
from ddpbench.worker.teardown import exit_now
atexit.register(lambda: print("handler ran", flush=False))
print("measured", end=" ")
sys.stderr.write("to stderr")
exit_now(3)
"""


def test_exit_now_runs_exit_handlers_flushes_and_keeps_the_code():
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stdout == "measured handler ran\n" and done.stderr == "to stderr"
