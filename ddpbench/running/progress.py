"""A run's progress bar, drawn by the launcher from the ranks' heartbeats.

The workers' own output goes to the log folder (the terminal sees it only with --verbose), so the
bar cannot come from them; the heartbeat files say how far every rank got, about once a second.
"""

from __future__ import annotations

import sys
import threading

from ddpbench.config.spec import RunSpec
from ddpbench.running.heartbeats import read_heartbeats

POLL_S = 0.5


class RunProgress:
    """A bar of the slowest rank's steps (warm-up included) and the phase it is in; a no-op when
    not `enabled` (no terminal, --verbose), so callers need not ask."""

    def __init__(self, spec: RunSpec, heartbeat_dir: str, enabled: bool):
        self.spec, self.heartbeat_dir = spec, heartbeat_dir
        self._stop = threading.Event()
        self._thread = None
        if enabled:
            self._thread = threading.Thread(target=self._draw, name="ddpbench-progress", daemon=True)
            self._thread.start()

    def _draw(self) -> None:
        from tqdm import tqdm

        what = f"{self.spec.strategy} {self.spec.workload} x{self.spec.world_size}"
        with tqdm(total=self.spec.steps, desc=f"{what}: starting", unit="step", file=sys.stderr, leave=False) as bar:
            while not self._stop.wait(POLL_S):
                beats = read_heartbeats(self.heartbeat_dir)
                if not beats:
                    continue
                slowest = min(beats.values(), key=lambda beat: beat.get("step", -1))
                bar.set_description(f"{what}: {slowest.get('phase', '')}", refresh=False)
                bar.update(max(0, slowest.get("step", -1) + 1 - bar.n))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
