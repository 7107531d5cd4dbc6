"""Per-rank heartbeats: how far each rank got, so a hang can be pinned on the right rank.

When one rank hangs, the others wait in the next collective until the process-group timeout
fires, and torchrun then names the first rank that *failed* (a victim that timed out waiting) as
the root cause. The heartbeat tells them apart: every rank's background thread writes, about once
a second, the last step whose forward/backward the rank entered (its batch was ready); the hung
rank is the one that never entered the step the others are waiting in.

The training loop only assigns an integer (`beat.step = i`); the file writing happens on the thread.
"""

from __future__ import annotations

import glob
import json
import os
import threading
import time

from ddpbench.record import write_atomic

HEARTBEAT_ENV = "DDPBENCH_HEARTBEAT_DIR"
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


def read_heartbeats(folder: str) -> dict[int, dict]:
    beats = {}
    for path in glob.glob(os.path.join(folder, "rank-*.json")):
        try:
            with open(path, encoding="utf-8") as handle:
                beat = json.load(handle)
            beats[int(beat["rank"])] = beat
        except (OSError, ValueError, KeyError):
            continue
    return beats


def hung_ranks(beats: dict[int, dict]) -> tuple[list[int], str]:
    """The ranks that fell behind, and a sentence saying how that was decided."""
    running = {rank: beat for rank, beat in beats.items() if beat.get("phase") != "done"}
    if not running:
        return [], "every rank finished its steps"
    furthest = max(beat["step"] for beat in running.values())
    behind = sorted(rank for rank, beat in running.items() if beat["step"] < furthest)
    if behind:
        steps = ", ".join(f"rank {r} at step {running[r]['step']}" for r in behind)
        return behind, f"{steps}, while other ranks had entered step {furthest} and waited for them"
    return [], f"all ranks had entered step {furthest}: the hang is inside that step on every rank"
