"""Ranks and nodes of one run, summarised so that 1,024 ranks read as easily as 2. No torch.

Everything here works on the run's (ranks x steps) step-time matrix with numpy; no per-step
Python objects are built, so a 1,024-rank x 5,000-step run is summarised in milliseconds.

Which figure shows a rank's own speed: under DDP every rank waits for the slowest at each
all-reduce, so step times even out across ranks and the straggler hides in everyone's step time.
Steps of DDP on one rank (the in-process ablation) and the no_sync() replay have no waiting in
them. The per-rank table measures each rank by the first of them the run has, else by its step less
its exposed communication in the trace (a script's run), else by its step times, and says which.
Whether a rank held the others back is `straggler`'s, the one definition every view uses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ddpbench.analysis.ablation import own_steps_by_rank
from ddpbench.records.schema import Record
from ddpbench.records.sidecar import step_time_matrix

RANK_DETAIL_LIMIT = 8
"""Up to this many ranks a run is drawn rank by rank (a box per rank stays readable); beyond it,
summaries: heat map, percentile bands, the slowest ranks and nodes by name."""
SLOWEST_SHOWN = 5
RANK_COLUMNS = [
    "rank",
    "host",
    "step_p50_s",
    "step_p90_s",
    "step_max_s",
    "no_sync_p50_s",
    "measure_s",
    "above_median_pct",
    "measure",
]


def step_matrix(record: Record) -> np.ndarray | None:
    """(ranks x timed steps) in rank order; None when the ranks timed different numbers of steps."""
    ranks = sorted(record.ranks, key=lambda rank: rank.rank)
    matrix = step_time_matrix(ranks)
    return matrix if matrix is not None and matrix.size else None


def hosts(record: Record) -> list[str]:
    return [rank.hostname or record.env.hostname or "?" for rank in sorted(record.ranks, key=lambda r: r.rank)]


def rank_frame(record: Record) -> pd.DataFrame:
    """One row per rank: its host, step-time percentiles, its no_sync replay median where there is
    one, and how far the straggler measure sits above the median rank's. (No "slowest rank in % of
    steps": under DDP the ranks step in lockstep, so that count names someone every step whatever
    the ranks are; whether one held the others back is `straggler`'s.)"""
    matrix = step_matrix(record)
    if matrix is None:
        return pd.DataFrame(columns=RANK_COLUMNS)
    percentiles = np.percentile(matrix, [50, 90], axis=1)
    frame = pd.DataFrame(
        {
            "rank": [rank.rank for rank in sorted(record.ranks, key=lambda r: r.rank)],
            "host": hosts(record),
            "step_p50_s": percentiles[0],
            "step_p90_s": percentiles[1],
            "step_max_s": matrix.max(axis=1),
        }
    )
    replay = record.overlap.no_sync if record.overlap else None
    has_replay = bool(replay) and len(replay.by_rank) == len(frame)
    frame["no_sync_p50_s"] = [r.no_sync_step_time_median_s for r in replay.by_rank] if has_replay else np.nan
    own = own_steps_by_rank(record)
    traced = _trace_own_steps(record)
    if own is not None and len(own) == len(frame):
        frame["measure_s"], frame["measure"] = own, LADDER_MEASURE
    elif has_replay:
        frame["measure_s"], frame["measure"] = frame["no_sync_p50_s"], REPLAY_MEASURE
    elif traced is not None and len(traced) == len(frame):
        # A script's run has neither: a rank's profiled step less its exposed communication (the
        # wait for its peers with the transfer) is its own work, which DDP does not even out.
        frame["measure_s"], frame["measure"] = traced, TRACE_MEASURE
    else:
        frame["measure_s"], frame["measure"] = frame["step_p50_s"], STEP_MEASURE
    frame["above_median_pct"] = 100.0 * (frame["measure_s"] / frame["measure_s"].median() - 1)
    return frame[RANK_COLUMNS]


LADDER_MEASURE = "own step on DDP on one rank (in-process ablation, mean over rounds)"
REPLAY_MEASURE = "no_sync replay median"
TRACE_MEASURE = "profiled step less its exposed communication (trace)"
STEP_MEASURE = "median step time"


def _trace_own_steps(record: Record) -> list[float] | None:
    """Per rank, the median of its profiled steps' span less their exposed communication, in
    seconds, from its own trace (both from the same steps). None without every rank's trace."""
    trace = record.overlap.trace if record.overlap else None
    views = trace.by_rank if trace else []
    if not views or any(not view.steps for view in views):
        return None
    return [float(np.median([s.span_us - s.exposed_comm_us for s in view.steps])) / 1e6 for view in views]


def measure_name(ranks: pd.DataFrame) -> str:
    """What the straggler verdict compared, in words."""
    if "measure" in ranks and len(ranks):
        return str(ranks["measure"].iloc[0])
    return REPLAY_MEASURE if ranks["no_sync_p50_s"].notna().all() else STEP_MEASURE


def node_frame(ranks: pd.DataFrame) -> pd.DataFrame:
    """One row per host: its ranks, the median of their measure, and its slowest rank."""
    if ranks.empty:
        return pd.DataFrame(columns=["host", "ranks", "measure_s", "above_median_pct", "slowest_rank"])
    worst = ranks.loc[ranks.groupby("host")["measure_s"].idxmax(), ["host", "rank"]].set_index("host")["rank"]
    nodes = ranks.groupby("host", sort=False).agg(ranks=("rank", "count"), measure_s=("measure_s", "median"))
    nodes["above_median_pct"] = 100.0 * (nodes["measure_s"] / ranks["measure_s"].median() - 1)
    nodes["slowest_rank"] = worst
    return nodes.reset_index().sort_values("measure_s", ascending=False).reset_index(drop=True)


def step_bands(matrix: np.ndarray) -> pd.DataFrame:
    """Per timed step, the spread over ranks: min, p50, p90, p99 and max step time."""
    quantiles = np.percentile(matrix, [0, 50, 90, 99, 100], axis=0)
    return pd.DataFrame(quantiles.T, columns=["min_s", "p50_s", "p90_s", "p99_s", "max_s"]).rename_axis("step")


def heat_map_bins(matrix: np.ndarray, max_columns: int = 400) -> tuple[np.ndarray, int]:
    """The matrix with steps averaged in bins of equal width so that at most `max_columns` remain
    (an image wider than the page only aliases); returns the binned matrix and the bin width."""
    steps = matrix.shape[1]
    width = max(1, -(-steps // max_columns))
    usable = (steps // width) * width
    binned = matrix[:, :usable].reshape(matrix.shape[0], -1, width).mean(axis=2)
    return binned, width


def rank_spread_frame(records: list[Record]) -> pd.DataFrame:
    """One row per run launched by torchrun (ddp, fsdp2, replicate): the spread of its ranks'
    median step times (p50, p90 and max over ranks), for one figure of every world size."""
    rows = []
    for record in records:
        if record.status != "ok" or not record.spec.launched_by_torchrun:
            continue
        matrix = step_matrix(record)
        if matrix is None:
            continue
        medians = np.median(matrix, axis=1)
        rows.append(
            {
                "run_id": record.run_id,
                "world_size": record.spec.world_size,
                "p50_s": float(np.median(medians)),
                "p90_s": float(np.percentile(medians, 90)),
                "max_s": float(medians.max()),
                "iteration_p50_s": float(np.median(matrix.max(axis=0))),
            }
        )
    return pd.DataFrame(rows, columns=["run_id", "world_size", "p50_s", "p90_s", "max_s", "iteration_p50_s"])


def exposed_across_ranks(record: Record) -> dict | None:
    """Exposed communication of a DDP run's ranks (no_sync replay), as a distribution with the
    worst rank named, instead of one figure per rank."""
    replay = record.overlap.no_sync if record.overlap else None
    if not replay or not replay.by_rank:
        return None
    exposed = np.array([rank.exposed_comm_s for rank in replay.by_rank])
    worst = int(exposed.argmax())
    host_of = dict(zip([rank.rank for rank in sorted(record.ranks, key=lambda r: r.rank)], hosts(record)))
    return {
        "p50_s": float(np.median(exposed)),
        "p90_s": float(np.percentile(exposed, 90)),
        "max_s": float(exposed.max()),
        "worst_rank": worst,
        "worst_host": host_of.get(worst, "?"),
    }
