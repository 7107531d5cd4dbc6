"""How a rank that succeeded leaves: its exit handlers, its output flushed, then `os._exit`,
without the interpreter's finalization.

destroy_process_group() takes the group out of torch's registry, but a group that DDP was built on
stays alive (DDP's C++ side holds it), and so do gloo's worker threads. A worker thread frees each
finished collective's work object a moment after the collective returns; when that work holds
tensors owned by Python (a gather's) it takes the GIL to free them. If the main thread has reached
interpreter finalization by then, taking the GIL ends the thread with pthread_exit, whose unwind
through a noexcept frame aborts the process: `terminate called without an active exception`,
SIGABRT, after a run that measured everything. Seen about once in ten 2-rank runs on a loaded
machine; the core dump showed gloo's runLoop in ~AsyncGatherWork while the main thread ran the
final collection in Py_FinalizeEx. Skipping finalization closes that window; the exit handlers
(a script's loggers among them) still run first.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing left to lose
            pass
    os._exit(code)
