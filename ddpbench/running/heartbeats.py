"""Reading the per-rank heartbeats (written by `ddpbench.worker.heartbeat`) after a run, and
deciding from them which rank hung."""

from __future__ import annotations

import glob
import json
import os

HEARTBEAT_ENV = "DDPBENCH_HEARTBEAT_DIR"
"""The launcher tells the workers where to write their heartbeats through this variable."""


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
