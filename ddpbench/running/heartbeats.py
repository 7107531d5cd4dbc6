"""Reading the per-rank heartbeats (written by `ddpbench.worker.heartbeat`) after a run, and
deciding from them which rank hung, where, and what the others wait in.

The rule: every collective needs every rank, so the ranks that wait have issued one collective
more than the rank that keeps them waiting. The rank behind in collectives is the hung one, and
its step and place in the step say where it is stuck. A rank whose collectives no longer match
the others' (a different operation or size under the same number, in the Flight Recorder dumps),
or which got further through the program with no more collectives than the others, skipped one.
"""

from __future__ import annotations

import glob
import json
import os

_PHASES = {"starting": 0, "warm-up": 1, "timed": 1, "checks": 2, "overlap phases": 3, "done": 4}
_PLACES = {None: 0, "data": 1, "forward": 2, "backward": 3, "optimizer": 4, "barrier": 5}
_IN_STEP = ("data", "forward", "backward", "optimizer")


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


def position(beat: dict) -> tuple:
    """How far through the program a rank got, comparable across ranks."""
    return _PHASES.get(beat.get("phase"), 0), beat.get("step", -1), _PLACES.get(beat.get("where"), 0)


def place(beat: dict) -> str:
    """Where a rank is, in words: "forward of step 7", "the barrier after step 9"."""
    phase, step, where = beat.get("phase"), beat.get("step", -1), beat.get("where")
    if phase in ("warm-up", "timed") and where in _IN_STEP:
        return f"{where} of step {step}"
    if phase in ("warm-up", "timed") and where == "barrier":
        return f"the barrier after step {step}"
    if phase in ("warm-up", "timed"):
        return f"step {step}"
    return f"{where} during the {phase} phase" if where and phase not in ("starting", "done") else f"the {phase} phase"


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _op_name(operations: dict | None, rank: int, number) -> str:
    """ "all_reduce" when the Flight Recorder saw the collective (gloo:all_reduce), else "collective"."""
    found = (operations or {}).get(rank, {}).get(number)
    return found[0].split(":")[-1] if found else "collective"


def _op(operations: dict | None, rank: int, number) -> str:
    return f"{_op_name(operations, rank, number)} #{number}"


def first_mismatch(operations: dict[int, dict[int, tuple]]) -> int | None:
    """The first collective number at which ranks issued different operations (name or sizes)."""
    common = set.intersection(*(set(ops) for ops in operations.values())) if operations else set()
    for number in sorted(common):
        if len({ops[number] for ops in operations.values()}) > 1:
            return number
    return None


def _skippers(running: dict[int, dict], counts: dict[int, int], operations: dict | None, mismatch: int | None):
    """The ranks that skipped a collective: whose collective #k is the others' #k+1 (they
    skipped the others' #k); else those furthest ahead in the program, fewest collectives first."""
    if mismatch is not None:
        shifted = [
            rank
            for rank in running
            if any(
                operations[rank].get(mismatch) == operations[other].get(mismatch + 1) is not None
                for other in running
                if other != rank
            )
        ]
        if shifted:
            return shifted
    furthest = max(position(beat) for beat in running.values())
    ahead = [rank for rank in running if position(running[rank]) == furthest]
    fewest = min(counts[rank] for rank in ahead)
    return [rank for rank in ahead if counts[rank] == fewest]


def find_hang(beats: dict[int, dict], operations: dict[int, dict[int, tuple]] | None = None) -> dict | None:
    """The hang the heartbeats show, or None. `operations`: per rank, collective number ->
    (operation, sizes) from the Flight Recorder dumps, where there are any."""
    running = {rank: beat for rank, beat in beats.items() if beat.get("phase") != "done"}
    if not running or len(beats) < 2:
        return None
    counts = {rank: beat.get("collectives") for rank, beat in running.items()}
    if None in counts.values() or len(running) < 2:
        return _by_steps(running)
    operations = {rank: ops for rank, ops in (operations or {}).items() if rank in running and ops} or None
    mismatch = first_mismatch(operations) if operations and len(operations) == len(running) else None
    most = max(counts.values())
    behind = [rank for rank in running if counts[rank] < most]
    if mismatch is None and behind:
        kind, culprits = "hung", behind
    elif mismatch is not None or len({position(beat) for beat in running.values()}) > 1:
        kind, culprits = "skipped", _skippers(running, counts, operations, mismatch)
    else:
        return None  # every rank at the same place with the same collectives: nobody to blame
    others = sorted(set(running) - set(culprits))
    first = running[culprits[0]]
    waiting = {str(rank): f"{_op(operations, rank, counts[rank])} ({place(running[rank])})" for rank in others}
    if kind == "hung":
        explanation = "; ".join(
            f"rank {rank} stuck in {place(running[rank])} ({counts[rank]} collectives issued)" for rank in culprits
        )
        explanation += "".join(f"; rank {rank} waits in {words}" for rank, words in waiting.items())
    elif mismatch is not None:
        explanation = (
            f"{_ranks(culprits)} skipped a collective: its collective #{mismatch} is "
            f"{_op_name(operations, culprits[0], mismatch)} ({place(first)}), while "
            + "; ".join(
                f"rank {rank}'s is {_op_name(operations, rank, mismatch)} ({place(running[rank])})" for rank in others
            )
        )
    else:
        explanation = (
            f"{_ranks(culprits)} skipped a collective: it got to {place(first)} with "
            f"{counts[culprits[0]]} collectives, while "
            + "; ".join(f"rank {rank} is in {place(running[rank])} with {counts[rank]}" for rank in others)
        )
    return {
        "kind": kind,
        "ranks": sorted(culprits),
        "step": first.get("step"),
        "where": first.get("where"),
        "phase": first.get("phase"),
        "collectives": {str(rank): counts[rank] for rank in sorted(running)},
        "waiting": waiting,
        "explanation": explanation,
    }


def _by_steps(running: dict[int, dict]) -> dict | None:
    """Without collective counts (heartbeats of an older ddpbench, a group that could not be
    read): the ranks that had not entered the step the others were in."""
    furthest = max(beat["step"] for beat in running.values())
    behind = sorted(rank for rank, beat in running.items() if beat["step"] < furthest)
    if not behind:
        return None
    steps = ", ".join(f"rank {r} at step {running[r]['step']}" for r in behind)
    first = running[behind[0]]
    return {
        "kind": "hung",
        "ranks": behind,
        "step": first["step"],
        "where": first.get("where"),
        "phase": first.get("phase"),
        "collectives": None,
        "waiting": {},
        "explanation": f"{steps}, while other ranks had entered step {furthest} and waited for them",
    }
