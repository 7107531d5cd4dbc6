"""Per-rank heartbeats: how far each rank got, so a hang can be pinned on the right rank.

When one rank hangs, the others wait in the next collective until the process-group timeout
fires, and torchrun then names the first rank that *failed* (a victim that timed out waiting) as
the root cause. The heartbeat tells them apart: every rank's background thread writes, about once
a second, the last step whose forward/backward the rank entered (its batch was ready); the hung
rank is the one that never entered the step the others are waiting in.

The training loop only assigns an integer (`beat.step = i`); the file writing happens on the thread.
"""

from __future__ import annotations

import json
import os
import threading
import time

from ddpbench.records.store import write_atomic
from ddpbench.running.heartbeats import HEARTBEAT_ENV  # noqa: F401 (the worker reads it from here)
INTERVAL_S = 1.0


class Heartbeat:
    def __init__(self, folder: str | None, rank: int):
        self.folder, self.rank = folder, rank
        self.step = -1  # the last step whose forward/backward this rank entered; -1 before the first
        self.phase = "starting"
        self.batch_size = None  # per device, once the workload has resolved it
        self._stop = threading.Event()
        if folder:
            os.makedirs(folder, exist_ok=True)
            self._write()
            threading.Thread(target=self._run, name="ddpbench-heartbeat", daemon=True).start()

    def _write(self) -> None:
        beat = {"rank": self.rank, "step": self.step, "phase": self.phase, "time": time.time(), "pid": os.getpid(),
                "batch_size": self.batch_size}
        write_atomic(os.path.join(self.folder, f"rank-{self.rank}.json"), json.dumps(beat))

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            try:
                self._write()
            except OSError:  # a full disk must not kill the run it is watching
                pass

    def enter(self, phase: str, **facts) -> None:
        """A new phase (rare, so written at once): e.g. enter("warm-up", batch_size=8)."""
        self.phase = phase
        for name, value in facts.items():
            setattr(self, name, value)
        if self.folder:
            self._write()

    def stop(self, phase: str = "done") -> None:
        self.phase = phase
        self._stop.set()
        if self.folder:
            self._write()
