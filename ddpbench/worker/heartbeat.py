"""Per-rank heartbeats: how far each rank got, so a hang can be pinned on the right rank.

When one rank hangs, the others wait in their next collective until the process-group timeout
fires, and torchrun then names the first rank that *failed* (a victim that timed out waiting) as
the root cause. A step counter cannot tell them apart when the hang is inside a step: every rank
entered it. So each rank also says where in the step it is (data, forward, backward, optimizer,
or the barrier after the steps), and its background thread reads how many collectives the
process group has issued (its sequence number, readable while the main thread is blocked in
one): the hung rank is the one behind in collectives.

The training loop pays only attribute stores (`beat.step = i`, `beat.where = "forward"`); the
thread reads the sequence number and writes the file about once a second. When nothing has moved
for `stall_after_s` (half the process-group timeout), it dumps the rank's stacks and Flight
Recorder buffer once (`hang_dumps`), before the timeout tears the run down.
"""

from __future__ import annotations

import json
import os
import threading
import time

from ddpbench.config.channels import HEARTBEAT_ENV  # noqa: F401 (the worker reads it from here)
from ddpbench.records.store import write_atomic
from ddpbench.worker import hang_dumps

INTERVAL_S = 1.0


class Heartbeat:
    def __init__(self, folder: str | None, rank: int, stall_after_s: float | None = None):
        self.folder, self.rank = folder, rank
        self.step = -1  # the step this rank is in (warm-up steps count from 0); -1 before the first
        self.where = None  # where in the step: data, forward, backward, optimizer, barrier
        self.phase = "starting"
        self.batch_size = None  # per device, once the workload has resolved it
        self.stall_after_s = stall_after_s
        self.collectives = None  # collectives this rank's process group has issued, read by the thread
        self.dumps: dict[str, str] = {}
        self._count_collectives = None
        self._backend = None
        self._stop = threading.Event()
        self._thread = None
        self._progress, self._progress_at = None, time.monotonic()
        if folder:
            os.makedirs(folder, exist_ok=True)
            self.dumps_folder = os.path.join(os.path.dirname(os.path.abspath(folder)), hang_dumps.DUMPS_FOLDER)
            os.makedirs(self.dumps_folder, exist_ok=True)
            self._sigterm_path = hang_dumps.stacks_path(self.dumps_folder, rank, "sigterm")
            self._sigterm_file = hang_dumps.stacks_on_sigterm(self._sigterm_path)
            self._write()
            self._thread = threading.Thread(target=self._run, name="ddpbench-heartbeat", daemon=True)
            self._thread.start()

    def watch_collectives(self, process_group, backend: str) -> None:
        """Count this process group's collectives from now on (call after init_process_group)."""
        self._count_collectives = process_group._get_sequence_number_for_group
        self._backend = backend

    def _write(self) -> None:
        beat = {
            "rank": self.rank,
            "step": self.step,
            "where": self.where,
            "phase": self.phase,
            "collectives": self.collectives,
            "time": time.time(),
            "pid": os.getpid(),
            "batch_size": self.batch_size,
            "stalled_s": round(self.stalled_s(), 1),
            "main_thread": f"0x{threading.main_thread().ident:016x}",
            "dumps": self.dumps,
        }
        write_atomic(os.path.join(self.folder, f"rank-{self.rank}.json"), json.dumps(beat))

    def stalled_s(self) -> float:
        return time.monotonic() - self._progress_at

    def _check_progress(self) -> None:
        if self._count_collectives is not None:
            try:
                self.collectives = self._count_collectives()
            except Exception:  # the group is being destroyed: keep the last count
                self._count_collectives = None
        progress = (self.phase, self.step, self.where, self.collectives)
        if progress != self._progress:
            self._progress, self._progress_at = progress, time.monotonic()
        elif (
            self.stall_after_s
            and not self.dumps
            and self.phase not in ("starting", "done")
            and self.stalled_s() >= self.stall_after_s
        ):
            self._dump_evidence()

    def _dump_evidence(self) -> None:
        """Once per run: the stacks, and the Flight Recorder when there is a process group."""
        self.dumps["stacks"] = hang_dumps.dump_stacks(hang_dumps.stacks_path(self.dumps_folder, self.rank))
        if self._backend:
            try:
                self.dumps["flight_recorder"] = hang_dumps.dump_flight_recorder(
                    hang_dumps.flight_recorder_path(self.dumps_folder, self.rank), self._backend
                )
            except Exception as exc:  # evidence is a bonus: never let it take the rank down
                self.dumps["flight_recorder_error"] = f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            try:
                self._check_progress()
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

    def close(self) -> None:
        """End the thread, so that it no longer reads the process group's sequence number: called
        before the group is destroyed, on success and failure alike."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * INTERVAL_S)
        self._count_collectives = None

    def stop(self, phase: str = "done") -> None:
        self.phase = phase
        self.close()
        if self.folder:
            self._write()
            hang_dumps.stop_stacks_on_sigterm(self._sigterm_file)
            if os.path.getsize(self._sigterm_path) == 0:
                os.unlink(self._sigterm_path)  # a run that ended well leaves no empty evidence
