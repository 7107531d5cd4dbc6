"""Drift: did the machine move, rather than the code? The machine canary (fixed probes, run at the
start and end of every sweep and kept in its manifest, see `ddpbench.running.canary`) of the
baseline and of the candidate, side by side, and the rule that turns a regression into a suspected
drift. No torch.

In a first, partial calibration (8 sessions, docs/measurements/gate-drift-calibration.md) no probe
tracked the suite's own drift (`benchmarks/gate_drift_calibration.py` collects it), so the rule is
conservative:

- it never turns a regression into a pass: a suspected drift still fails, with its own exit code,
  and asks for a same-job A/B to confirm;
- a probe's move is the smallest one its readings allow: the candidate's fastest reading (start or
  end of its sweep) against the baseline's slowest, 1.0 where the two ranges overlap, so a canary
  that wavers within a sweep moves nothing;
- the move must be a slowdown of at least DRIFT_MIN_MOVE, in the same direction as the regression,
  and at least DRIFT_SHARE of every regression on the log scale: a 30 % regression needs a probe at
  least 16 % slower. One regression the canary cannot account for makes the verdict a regression.

The other way round, a machine that got faster hides a slowdown: a candidate whose canary ran
faster than the baseline's, beyond the readings' spread as above, could be as much slower in code
(a canary 21 % faster hides a 17 % slowdown) and still measure as fast. So each throughput ratio is
divided by the least speed-up the canary shows (the fastest probe's `least_change`), and that
corrected ratio, with its interval, is judged against the threshold by the rule every comparison
follows (`stats.decide`): a measured 4.5 % slowdown on a canary 5 % faster is about 9 % of code.
Where a comparison that passed does not pass once corrected, the gate does not pass
(`FasterMachine.no_pass`): exit 4, as for a machine that slowed. A move of any size counts where it
changes a verdict; a move of at least DRIFT_MIN_MOVE is said even where it does not.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field

from ddpbench.gate import stats
from ddpbench.gate.compare import Comparison

# A probe must be this much slower (as a fraction) before it counts as moved: below it, the
# repetitions of one canary run already spread this much on a loaded machine.
DRIFT_MIN_MOVE = 0.05
# The share of a regression (log scale) the canary's move must reach to account for it.
DRIFT_SHARE = 0.5


def sweep_canary(path: str) -> list[dict]:
    """The canary runs kept in a sweep's (or stored baseline's) manifest; none for a record file or an
    older sweep."""
    manifest = os.path.join(path, "manifest.json")
    if not os.path.isfile(manifest):
        return []
    try:
        with open(manifest, encoding="utf-8") as handle:
            runs = json.load(handle).get("canary") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [run for run in runs if isinstance(run, dict)]


def readings(runs: list[dict]) -> dict[str, tuple[str, list[float]]]:
    """Per probe: its unit and every canary run's median (probes that were skipped or failed are left out)."""
    found: dict[str, tuple[str, list[float]]] = {}
    for run in runs:
        for name, probe in (run.get("probes") or {}).items():
            value = probe.get("value") if isinstance(probe, dict) else None
            if isinstance(value, int | float) and math.isfinite(value) and value > 0:
                unit, values = found.setdefault(name, (probe.get("unit", ""), []))
                values.append(float(value))
    return found


@dataclass
class ProbeMove:
    probe: str
    unit: str
    baseline: float | None
    """Median of the side's canary runs (None: that side lacks the probe)."""
    candidate: float | None
    change: float | None = None
    """candidate / baseline of the medians; below 1 is a slower machine."""
    least_change: float | None = None
    """The smallest change the readings allow (the candidate's best against the baseline's worst, or
    the other way round); 1.0 where the two sides' readings overlap. The drift rule uses this."""


@dataclass
class CanaryView:
    baseline_source: str
    baseline_runs: int
    candidate_runs: int
    moves: list[ProbeMove] = field(default_factory=list)
    drift: bool = False
    """A regression that the canary's move accounts for (see the module's rule)."""
    slowest: ProbeMove | None = None


def compare_canaries(baseline: list[dict], candidate: list[dict], baseline_source: str) -> CanaryView:
    before, after = readings(baseline), readings(candidate)
    view = CanaryView(baseline_source, len(baseline), len(candidate))
    for name in list(before) + [n for n in after if n not in before]:
        unit = (before.get(name) or after.get(name))[0]
        b, c = before.get(name, (unit, []))[1], after.get(name, (unit, []))[1]
        move = ProbeMove(name, unit, statistics.median(b) if b else None, statistics.median(c) if c else None)
        if b and c:
            move.change = move.candidate / move.baseline
            if max(c) < min(b):
                move.least_change = max(c) / min(b)
            elif min(c) > max(b):
                move.least_change = min(c) / max(b)
            else:
                move.least_change = 1.0
        view.moves.append(move)
    return view


def judge_drift(view: CanaryView, comparisons: list[Comparison]) -> CanaryView:
    """Mark the view as drift when every regression is accounted for by the most slowed probe."""
    regressions = [c for c in comparisons if c.verdict == "regression" and c.ratio]
    if not regressions or any(c.verdict == "not comparable" for c in comparisons):
        return view
    # Efficiency and the exposed share are ratios within one sweep: a uniformly slower machine
    # cancels out of them, so the canary cannot account for their regressions.
    if any(c.measure != "throughput" for c in regressions):
        return view
    moved = [m for m in view.moves if m.least_change is not None]
    if not moved:
        return view
    slowest = min(moved, key=lambda m: m.least_change)
    view.slowest = slowest
    if 1 - slowest.least_change < DRIFT_MIN_MOVE:
        return view
    view.drift = all(math.log(slowest.least_change) <= DRIFT_SHARE * math.log(c.ratio) for c in regressions)
    return view


@dataclass(frozen=True)
class Corrected:
    """A throughput comparison with the candidate machine's speed-up taken out."""

    configuration: str
    ratio: float
    """The measured ratio over the speed-up (above 1 is better, as every ratio)."""
    ratio_low: float | None
    ratio_high: float | None
    verdict: str
    """The corrected ratio judged by the gate's rule (`stats.decide`) at the comparison's level."""
    was: str
    """The comparison's own verdict."""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FasterMachine:
    """A candidate machine faster than the baseline's, beyond its canary's spread, and what the
    throughput comparisons say once its speed-up is taken out."""

    fastest: ProbeMove
    """The probe that moved most towards faster (its `least_change` above 1)."""
    corrected: list[Corrected]

    @property
    def speedup(self) -> float:
        return self.fastest.least_change

    @property
    def hidden(self) -> float:
        """The slowdown (fraction of throughput) that speed-up alone could hide: 1 - 1 / speed-up."""
        return 1 - 1 / self.speedup

    @property
    def no_pass(self) -> bool:
        """A comparison that passed (or improved) is a regression or inconclusive once corrected."""
        return any(one.was in ("pass", "improvement") and one.verdict in NOT_PASSING for one in self.corrected)


NOT_PASSING = ("regression", "inconclusive")


def faster_machine(view: CanaryView, comparisons: list[Comparison], settings: stats.GateSettings):
    """The candidate machine's speed-up taken out of every throughput comparison (see the module's
    rule); None where the machine did not get faster beyond its readings' spread, or where it did by
    less than DRIFT_MIN_MOVE and that changes no verdict (identical machines read "faster" by a
    sliver, with two readings a side, about one time in six)."""
    moved = [m for m in view.moves if m.least_change is not None and m.least_change > 1]
    if not moved:
        return None
    fastest = max(moved, key=lambda m: m.least_change)
    shift = math.log(fastest.least_change)
    corrected = []
    for comparison in comparisons:
        # Efficiency and the exposed share are ratios within one sweep: a machine's speed cancels.
        if comparison.measure != "throughput" or not comparison.ratio or comparison.se is None:
            continue
        df = comparison.df if comparison.df is not None else math.inf
        evidence = stats.Evidence(math.log(comparison.ratio) - shift, comparison.se, df)
        verdict, _ = stats.decide(evidence, comparison.alpha, settings)
        low, high = (
            None if end is None else end / fastest.least_change for end in (comparison.ratio_low, comparison.ratio_high)
        )
        corrected.append(
            Corrected(comparison.configuration, math.exp(evidence.change), low, high, verdict, comparison.verdict)
        )
    found = FasterMachine(fastest, corrected)
    if fastest.least_change - 1 < DRIFT_MIN_MOVE and not found.no_pass:
        return None
    return found


def faster_words(found: FasterMachine, max_regression: float, confirm_option: bool = False) -> str:
    move = found.fastest
    said = (
        f"faster machine: the candidate's canary ran {move.least_change - 1:.1%} faster ({move.probe}, at least), "
        f"which could hide a {found.hidden:.1%} slowdown"
    )
    worst = min(found.corrected, key=lambda one: one.ratio, default=None)
    if worst is None:
        return said + "; no throughput was compared"
    interval = ""
    if worst.ratio_low is not None and worst.ratio_high is not None:
        interval = f" (95 % interval {1 - worst.ratio_high:.1%} to {1 - worst.ratio_low:.1%})"
    change = f"{1 - worst.ratio:.1%} slower" if worst.ratio <= 1 else f"{worst.ratio - 1:.1%} faster"
    said += f"; corrected by it, {change}{interval} for {worst.configuration}"
    threshold = f"{100 * max_regression:.3g}%"
    if not found.no_pass:
        return said + f", within the {threshold} threshold: the verdict stands"
    return (
        said
        + f", {'beyond' if worst.verdict == 'regression' else 'possibly beyond'} the {threshold} threshold: no pass; "
        "confirm with `make gate BASE=<ref>`" + (" or --confirm-with" if confirm_option else "")
    )


def _figure(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _change(value: float | None) -> str:
    return "" if value is None else f"{value - 1:+.1%}"


def canary_table(view: CanaryView) -> str:
    lines = [
        f"canary (machine probes, higher is faster; baseline: {view.baseline_source}, {view.baseline_runs} "
        f"reading(s); candidate: {view.candidate_runs})",
        f"  {'probe':<16} {'unit':<15} {'baseline':>10} {'candidate':>10} {'change':>8} {'at least':>9}",
    ]
    for m in view.moves:
        lines.append(
            f"  {m.probe:<16} {m.unit:<15} {_figure(m.baseline):>10} {_figure(m.candidate):>10} "
            f"{_change(m.change):>8} {_change(m.least_change):>9}"
        )
    if not view.moves:
        lines.append("  (neither side has canary readings: sweeps from before the canary)")
    return "\n".join(lines)


def drift_words(view: CanaryView, confirm_option: bool = False) -> str:
    """What the gate says of a suspected drift; `confirm_option`: the gate has --confirm-with."""
    move = view.slowest
    return (
        f"drift? the machine's canary moved by {_change(move.least_change)} ({move.probe}, at least): "
        "confirm with `make gate BASE=<ref>`" + (" or --confirm-with" if confirm_option else "")
    )


def canary_json(view: CanaryView) -> dict:
    return {
        "baseline_source": view.baseline_source,
        "baseline_readings": view.baseline_runs,
        "candidate_readings": view.candidate_runs,
        "probes": [m.__dict__ for m in view.moves],
        "drift_suspected": view.drift,
        "rule": {"min_move": DRIFT_MIN_MOVE, "share_of_regression": DRIFT_SHARE},
    }


def gate_canary(baseline_path: str, candidate_path: str, baseline_is_history: bool) -> CanaryView | None:
    """The canaries of a gate's two sides; None where neither side has one (sweeps from before it).
    A history keeps no canary: its reference is then the stored baseline's of the same machine class
    and suite, where there is one."""
    from ddpbench.gate.baselines import baseline_dir

    source = baseline_path
    if baseline_is_history:
        try:
            source = baseline_dir(candidate_path) if os.path.isdir(candidate_path) else ""
        except ValueError:
            source = ""
    baseline = sweep_canary(source) if source else []
    candidate = sweep_canary(candidate_path)
    if not baseline and not candidate:
        return None
    label = f"stored baseline {source}" if baseline_is_history else source
    return compare_canaries(baseline, candidate, label if baseline else "none")
