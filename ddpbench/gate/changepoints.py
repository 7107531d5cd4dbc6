"""Change points in a history series: where a configuration's speed moved and stayed moved. No torch.

Apache Otava (`otava.analysis.compute_change_points`, the E-divisive method of Hunter/Otava) does
the detection when it is installed in its own environment, `.venv-otava` (`make otava-venv`; it
pins numpy, so it cannot share ddpbench's). It is called as a subprocess with the series as JSON
on stdin. `DDPBENCH_OTAVA_PYTHON` names another interpreter that has it.

Without Otava a simple rule stands in, and every caller is told which one ran:
binary segmentation of the log values (of the values themselves for a series that may hold zeros,
`log=False`: a host's wait for it, sweep by sweep); a split is accepted where Welch's t-test between the two
sides gives p < FALLBACK_PVALUE divided by the number of splits tried (Bonferroni), with at least
MIN_SEGMENT points on each side, then each side is split again.
"""

from __future__ import annotations

import json
import math
import os
import subprocess

import numpy as np

MIN_POINTS = 6
"""A series needs this many points before asking where it changed."""
MIN_SEGMENT = 3
FALLBACK_PVALUE = 0.001
OTAVA_PVALUE = 0.001
OTAVA_WINDOW = 50
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_OTAVA_SCRIPT = """
import json, sys
from otava.analysis import compute_change_points
request = json.load(sys.stdin)
found = {}
for name, values in request["series"].items():
    points, _ = compute_change_points(list(values), window_len=request["window"], max_pvalue=request["pvalue"])
    found[name] = sorted(int(p.index) for p in points)
print(json.dumps(found))
"""


def otava_python() -> str | None:
    """The interpreter with Otava: $DDPBENCH_OTAVA_PYTHON, else .venv-otava here or in the checkout."""
    named = os.environ.get("DDPBENCH_OTAVA_PYTHON")
    if named:
        return named if os.path.exists(named) else None
    for root in (os.getcwd(), REPO):
        candidate = os.path.join(root, ".venv-otava", "bin", "python")
        if os.path.exists(candidate):
            return candidate
    return None


def _otava(series: dict, python: str) -> dict:
    # Series names may be anything hashable (configuration keys); JSON gets their positions.
    names = list(series)
    request = json.dumps(
        {
            "series": {str(i): series[name] for i, name in enumerate(names)},
            "window": OTAVA_WINDOW,
            "pvalue": OTAVA_PVALUE,
        }
    )
    done = subprocess.run([python, "-c", _OTAVA_SCRIPT], input=request, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError((done.stderr.strip().splitlines() or ["no output"])[-1])
    found = json.loads(done.stdout)
    return {name: list(found[str(i)]) for i, name in enumerate(names)}


def fallback_change_points(values: list[float], log: bool = True) -> list[int]:
    """The documented stand-in (see the module docstring): indices where a new segment starts."""
    # Here, not at the top: scipy.stats takes about a second to import, and with Otava the gate
    # never needs it (measured in docs/measurements/history-speed.md).
    from scipy import stats as scipy_stats

    logs = np.log(np.asarray(values, dtype=float)) if log else np.asarray(values, dtype=float)

    def split(start: int, end: int) -> list[int]:
        candidates = range(start + MIN_SEGMENT, end - MIN_SEGMENT + 1)
        if not candidates:
            return []
        best, best_p = None, 1.0
        for index in candidates:
            left, right = logs[start:index], logs[index:end]
            if np.ptp(left) == 0 and np.ptp(right) == 0:
                p = 0.0 if left[0] != right[0] else 1.0
            else:
                p = float(scipy_stats.ttest_ind(left, right, equal_var=False).pvalue)
            if math.isfinite(p) and p < best_p:
                best, best_p = index, p
        if best is None or best_p >= FALLBACK_PVALUE / len(candidates):
            return []
        return split(start, best) + [best] + split(best, end)

    return split(0, len(logs))


def change_points(series: dict[str, list[float]], log: bool = True) -> tuple[dict[str, list[int]], str]:
    """Change points (indices where a new segment starts) of every series long enough to have
    them, and which method found them, in words. `log`: the fallback splits the log values (speeds);
    False for series that may hold zeros (Otava takes the values as they are either way)."""
    long_enough = {name: [float(v) for v in values] for name, values in series.items() if len(values) >= MIN_POINTS}
    found = {name: [] for name in series}
    if not long_enough:
        return found, f"none: every series has fewer than {MIN_POINTS} points"
    python = otava_python()
    if python:
        try:
            found.update(_otava(long_enough, python))
            return found, f"Apache Otava (E-divisive, p < {OTAVA_PVALUE}) via {python}"
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            reason = f"Otava at {python} failed: {exc}"
    else:
        reason = "Otava is not installed: make otava-venv"
    for name, values in long_enough.items():
        found[name] = fallback_change_points(values, log)
    return found, (
        f"fallback rule: binary segmentation{'' if log else ' of the values'}, Welch t-test p < {FALLBACK_PVALUE} "
        "(Bonferroni over "
        f"splits), at least {MIN_SEGMENT} points a side ({reason})"
    )


def since_last_change(values: list, points: list[int]) -> list:
    return values[points[-1] :] if points else list(values)
