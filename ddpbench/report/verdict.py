"""The report's first screen: the verdict, one row per workload at its largest world size of DDP:
the scaling efficiency with its interval over the runs, DDP against DataParallel where they compare,
the largest cause of lost efficiency (or that the loss is within noise), whether a rank held the
others back, whether the correctness checks passed, and the one change to try. No torch.
"""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup

from ddpbench.analysis.answer_text import ADVICE_MIN_POINTS, check_line, percent, runs_words
from ddpbench.analysis.answers import Answer
from ddpbench.analysis.causes import LABELS
from ddpbench.analysis.frames import figure_cell

SHORT_ADVICE = {
    "exposed_comm": "another bucket size (--bucket-cap-mb) or compression (--comm-hook bf16_compress)",
    "overlap_slowdown": "fewer, larger buckets (--bucket-cap-mb) or compression (--comm-hook bf16_compress)",
    "ddp_overhead": "--static-graph and --gradient-as-bucket-view",
    "forward_optimizer": "--gradient-as-bucket-view",
    "contention": "fewer threads or ranks per host (--threads-per-rank)",
    "data": "more DataLoader workers (--num-workers)",
}
CPU_NOTE = (
    "On CPU: {ranks} gloo processes share this machine's cores. This shows how DDP's machinery behaves and where a "
    "step goes on this host; it tells nothing of NCCL, GPU kernels or a real network."
)


def headline_answers(answers: list[Answer]) -> dict[str, Answer]:
    """Per workload, the answer at its largest world size (eager DDP before other strategies)."""
    chosen: dict[str, Answer] = {}
    for answer in answers:
        spec = answer.record.spec
        current = chosen.get(answer.workload)
        rank = (spec.world_size, spec.strategy_name == "ddp")
        if current is None or rank > (current.world_size, current.record.spec.strategy_name == "ddp"):
            chosen[answer.workload] = answer
    return dict(sorted(chosen.items()))


def _data_parallel(table: pd.DataFrame, answer: Answer) -> str:
    spec = answer.record.spec
    rows = table[(table["strategy"] == "dp") & (table["world_size"] == spec.world_size)]
    rows = rows[rows["workload"] == answer.workload]
    if spec.device == "cpu":
        return (
            "not comparable on CPU (one process, N x the threads)"
            if not rows.empty
            else "not run (on CPU: not comparable)"
        )
    if rows.empty:
        return "not run"
    row = rows.iloc[0]
    return figure_cell(row["efficiency"], row["efficiency_low"], row["efficiency_high"]) or "no local run"


def _largest(answer: Answer) -> str:
    largest = answer.largest()
    if largest:
        cause = answer.causes[largest[0]].points
        said = f"{LABELS[largest[0]]} {cause.value:.1f} ± {cause.half:.1f} pp"
        return said + ("".join(f" (tied with {LABELS[name]})" for name in largest[1:2]))
    if not answer.in_place:
        return "not measured in place"
    if answer.loss_within_noise():
        return "within noise: nothing lost beyond it"
    return "within noise: no single cause beyond it"


def _held_back(answer: Answer) -> str:
    straggler = answer.straggler
    if answer.world_size < 2 or straggler is None:
        return "one rank"
    if straggler.wait is None:
        return "cannot tell"
    if straggler.named:
        return f"{straggler.who()}, {straggler.phase_words}"
    return "no rank beyond noise"


def _cpu_denied(answer: Answer) -> str:
    """The rank that waited for a core beyond noise, with how much and whose the core was."""
    cpu = answer.cpu
    if cpu is None:
        return "not measured"
    most, throttled = cpu.most_waiting(), cpu.throttled_ranks()
    if most is None and not throttled:
        return "no rank beyond noise"
    said = []
    if most is not None:
        rank, share, others = most
        said.append(f"rank {rank}, {100 * share.value:.0f} % of its step")
        if others is not None:
            said[-1] += f" (other processes about {100 * others:.0f})"
    said += [f"rank {rank} throttled by its CPU quota" for rank in throttled]
    return "; ".join(said)


def _checks(answer: Answer) -> str:
    failed = answer.failed_checks()
    if failed:
        return "FAILED: " + ", ".join(failed)
    undecided = answer.undecided_checks()
    return "passed" + (f" ({', '.join(undecided)} not decided)" if undecided else "")


def _try(answer: Answer) -> str:
    worth = [name for name in answer.findings() if answer.causes[name].points.value >= ADVICE_MIN_POINTS]
    if not worth:
        return "nothing worth changing beyond noise"
    name = worth[0]
    if name == "straggler_wait":
        straggler = answer.straggler
        return f"look at {straggler.who()}'s host and device" if straggler and straggler.named else "look at the hosts"
    return SHORT_ADVICE[name]


def verdict_rows(answers: list[Answer], table: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for workload, answer in headline_answers(answers).items():
        rows.append(
            {
                "workload": f"{workload} x{answer.world_size}",
                "scaling efficiency": percent(answer.efficiency, runs=False)
                + (f" ({runs_words(answer.efficiency)})" if answer.efficiency else ""),
                "DataParallel": _data_parallel(table, answer),
                "largest cause of lost efficiency": _largest(answer),
                "rank that held the others back": _held_back(answer),
                "waiting for a core": _cpu_denied(answer),
                "correctness checks": _checks(answer),
                "try": _try(answer),
            }
        )
    return pd.DataFrame(rows)


def verdict_section(answers: list[Answer], table: pd.DataFrame, html) -> list[Markup]:
    if not answers:
        return []
    rows = verdict_rows(answers, table)
    blocks = [html.table_html(rows, text_columns=tuple(rows.columns))]
    notes = [f"{answer.name}: {said}" for answer in headline_answers(answers).values() if (said := check_line(answer))]
    left_out = [f"{a.name}: {', '.join(a.left_out)}" for a in answers if a.left_out]
    if left_out:
        notes.append(
            "Left out of the pooled figures (the speed check found their processes at another speed): "
            + "; ".join(left_out)
        )
    record = answers[0].record
    if record.spec.device == "cpu":
        notes.append(CPU_NOTE.format(ranks=max(answer.world_size for answer in answers)))
    blocks += [html.note(text) for text in notes]
    return blocks
