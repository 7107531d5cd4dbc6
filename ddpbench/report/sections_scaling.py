"""The report's sections on scaling and its ranks. In the body: E(N) against world size with its
intervals, and the ranks (each rank's step times, summaries beyond a few ranks: heat map, bands,
the slowest ranks and nodes; whether a rank held the others back). In the appendix: throughput and
the whole scaling table, and iteration time over the run."""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup

from ddpbench.analysis import ranks, registry
from ddpbench.analysis.answer_text import contention_parts
from ddpbench.analysis.cpu_denied import MATERIAL_SHARE
from ddpbench.analysis.frames import figure_cell, iteration_frame, step_time_frame
from ddpbench.analysis.straggler import SOURCES, run_straggler
from ddpbench.config.workloads import short_workload_name
from ddpbench.records.schema import Record
from ddpbench.report import plots
from ddpbench.report.blocks import ReportData, figure_html, metric_columns, note, table_html


def scaling_section(data: ReportData) -> list[Markup]:
    """The body's scaling figure: E(N) against world size, with its interval over the runs."""
    if data.table.empty or data.table["efficiency"].isna().all():
        return []
    caption = "Scaling efficiency E(N) = X(N) / (N x X(1)) against world size, ± its 95 % interval over the runs."
    if data.table["strategy_label"].astype(str).str.startswith("DataParallel on CPU").any():
        caption += " DataParallel on CPU is not drawn: one process with N x the threads replicates nothing."
    return [
        figure_html(
            plots.efficiency(data.table),
            "Line charts of scaling efficiency in percent against world size for each strategy, one per workload, "
            "with interval whiskers and a dashed line at 100 percent.",
            caption,
        )
    ]


def scaling_table_section(data: ReportData) -> list[Markup]:
    """The appendix: throughput against world size and the whole scaling table."""
    if data.table.empty:
        return []
    table = data.table
    blocks = [
        figure_html(
            plots.throughput(table),
            "Line charts of throughput against world size for each strategy, one per workload, with "
            "the ideal linear line from the local run.",
            "Throughput against world size; the grey dashed line is perfect linear scaling of the local run "
            "(compiled runs are dashed, or dotted under compiled autograd, in their strategy's colour). DataParallel "
            "on CPU is not drawn: one process with N x the threads replicates nothing (the table has it).",
        ),
    ]
    # memory has a section of its own
    metrics = [m.name for m in registry.METRICS if m.in_scaling_table and m.shown_unit != "MiB"]
    shown = table[
        [
            "workload",
            "strategy_label",
            "world_size",
            "batch_size",
            "global_batch",
            "sample_unit",
            *metrics,
            "speedup",
            "efficiency",
            "efficiency_low",
            "efficiency_high",
            "runs",
            "reference",
            "oversubscribed",
            "busy",
        ]
    ]
    shown, formats = metric_columns(shown, metrics)
    shown = shown.rename(
        columns={
            "strategy_label": "strategy",
            "world_size": "world size",
            "batch_size": "batch / device",
            "global_batch": "global batch",
            "sample_unit": "unit",
            "reference": "X(1)",
        }
    )
    shown["X(1)"] = shown["X(1)"].replace("", "local run")
    shown["oversubscribed"] = shown["oversubscribed"].map({True: "yes", False: ""})
    shown["busy"] = shown["busy"].map({True: "busy", False: ""})
    shown["efficiency"] = [
        figure_cell(value, low, high)
        for value, low, high in zip(shown.pop("efficiency"), shown.pop("efficiency_low"), shown.pop("efficiency_high"))
    ]
    formats.update({"batch / device": "{:.0f}", "global batch": "{:.0f}", "speedup": "{:.2f}x"})
    blocks.append(
        table_html(
            shown,
            formats,
            text_columns=("workload", "strategy", "unit", "efficiency", "X(1)", "oversubscribed", "busy"),
        )
    )
    if (shown["oversubscribed"] == "yes").any():
        blocks.append(
            Markup(
                '<p class="status-failed">Points marked oversubscribed ran more threads than usable '
                "cores: their throughput and efficiency describe time-sharing, not scaling.</p>"
            )
        )
    if (shown["busy"] == "busy").any():
        blocks.append(
            Markup(
                '<p class="status-failed">Points marked busy ran while other processes took cores or GPUs '
                "they wanted (each record's <code>machine_load</code> has the figures): their throughput "
                "is slower than this machine can give.</p>"
            )
        )
    return blocks


def ranks_section(data: ReportData) -> list[Markup]:
    """The body's ranks: each rank's step times in the DDP runs at each workload's largest world size
    (summaries beyond a few ranks), and whether a rank held the others back, per configuration."""
    ok = [(path, record) for path, record in data.records if record.status == "ok" and record.ranks]
    largest = {}
    for _, record in ok:
        if record.spec.strategy == "ddp" and record.spec.world_size > 1:
            workload = short_workload_name(record.spec.workload)
            if record.spec.world_size >= largest.get(workload, 0):
                largest[workload] = record.spec.world_size
    shown = [
        (p, r)
        for p, r in ok
        if r.spec.strategy == "ddp"
        and largest.get(short_workload_name(r.spec.workload)) == r.spec.world_size
        and len(r.ranks) <= ranks.RANK_DETAIL_LIMIT
    ]
    blocks = []
    step_times = step_time_frame(shown)
    if not step_times.empty:
        blocks.append(
            figure_html(
                plots.step_time_by_rank(step_times),
                "Box plots of DDP step time in milliseconds for each rank, one chart per workload at its largest "
                "world size.",
                "Each rank's step times (every run of the configuration): under DDP the ranks wait for each other, "
                "so their boxes sit level even when one is slow; whether one held the others back is below.",
            )
        )
    blocks += large_runs_blocks([r for _, r in ok])
    return blocks + stragglers_blocks(data) + cpu_denied_blocks(data) + ranks_by_host_blocks(data)


def iterations_section(data: ReportData) -> list[Markup]:
    ok = [(path, record) for path, record in data.records if record.status == "ok" and record.ranks]
    if not ok:
        return []
    return [
        figure_html(
            plots.iteration_over_steps(iteration_frame(ok)),
            "Line charts of iteration time in milliseconds over the timed steps of every run, one chart per workload.",
            "Iteration time (slowest rank) over the timed steps of each run.",
        )
    ]


def largest_ddp_runs(records: list[Record]) -> list[Record]:
    """Per workload, its largest DDP run beyond the rank-by-rank limit (the first of its repeats)."""
    chosen: dict[str, Record] = {}
    for record in records:
        if not record.spec.launched_by_torchrun or len(record.ranks) <= ranks.RANK_DETAIL_LIMIT:
            continue
        workload = short_workload_name(record.spec.workload)
        if workload not in chosen or record.spec.world_size > chosen[workload].spec.world_size:
            chosen[workload] = record
    return [chosen[workload] for workload in sorted(chosen)]


def large_runs_blocks(records: list[Record]) -> list[Markup]:
    """Runs beyond a few dozen ranks, summarised: the spread of ranks against world size; for the
    largest run of each workload a rank x step heat map, percentile bands, the slowest ranks with
    their hosts, the slowest nodes, and the straggler verdict."""
    large = largest_ddp_runs(records)
    if not large:
        return []
    blocks = [
        figure_html(
            plots.rank_spread(
                ranks.rank_spread_frame(records), {r.run_id: short_workload_name(r.spec.workload) for r in records}
            ),
            "Line charts of the median, 90th percentile and maximum over ranks of each rank's median "
            "step time, against world size on a log-2 axis, one chart per workload.",
            "How far the slowest ranks drift from the median rank as the world grows.",
        )
    ]
    for record in large:
        matrix = ranks.step_matrix(record)
        if matrix is None:
            continue
        title = f"{short_workload_name(record.spec.workload)}, {record.run_id}: {record.spec.world_size} ranks"
        binned, width = ranks.heat_map_bins(matrix)
        per_rank = ranks.rank_frame(record)
        found = run_straggler(record)
        blocks.append(Markup("<h3>{}</h3>").format(title))
        blocks.append(
            Markup('<p><strong>Held the others back:</strong> <span class="{}">{}</span> {}</p>').format(
                "status-failed" if found.named else "status-ok", found.sentence(), _basis(found)
            )
        )
        blocks.append(
            figure_html(
                plots.rank_heat_map(binned, width, title),
                f"Heat map of step time in milliseconds, {matrix.shape[0]} ranks by " f"{matrix.shape[1]} timed steps.",
                "Step time of every rank (rows) at every step (columns): a slow rank is a bright "
                "row, a slow moment of the whole job a bright column.",
            )
        )
        blocks.append(
            figure_html(
                plots.step_bands(ranks.step_bands(matrix), title),
                "Band chart of step time over the timed steps: median rank, 90th to 99th "
                "percentile of ranks, and fastest to slowest rank.",
                "Per step, how the ranks spread: a wide top band is a slow minority of ranks.",
            )
        )
        blocks.append(slowest_ranks_table(per_rank))
        if per_rank["host"].nunique() > 1:
            blocks.append(slowest_nodes_table(per_rank))
    return blocks


def slowest_ranks_table(per_rank: pd.DataFrame) -> Markup:
    measure = ranks.measure_name(per_rank)
    shown = per_rank.sort_values("measure_s", ascending=False).head(ranks.SLOWEST_SHOWN)
    shown = shown[["rank", "host", "step_p50_s", "step_p90_s", "no_sync_p50_s", "above_median_pct"]].copy()
    for column in ("step_p50_s", "step_p90_s", "no_sync_p50_s"):
        shown[column] = shown[column] * 1000
    shown.columns = [
        "rank",
        "host",
        "step p50 (ms)",
        "step p90 (ms)",
        "no_sync p50 (ms)",
        f"{measure} vs median rank (%)",
    ]
    return Markup("<p>The {} slowest of {} ranks by {}:</p>").format(len(shown), len(per_rank), measure) + table_html(
        shown, {c: "{:,.2f}" for c in shown.columns[2:]} | {shown.columns[5]: "{:+.1f}"}, text_columns=("host",)
    )


def slowest_nodes_table(per_rank: pd.DataFrame) -> Markup:
    nodes = ranks.node_frame(per_rank)
    shown = nodes.head(ranks.SLOWEST_SHOWN).assign(measure_s=lambda f: f["measure_s"] * 1000)
    shown = shown[["host", "ranks", "measure_s", "above_median_pct", "slowest_rank"]]
    shown.columns = [
        "host",
        "ranks",
        f"median {ranks.measure_name(per_rank)} (ms)",
        "vs median rank (%)",
        "its slowest rank",
    ]
    return Markup("<p>The {} slowest of {} nodes (median over each node's ranks):</p>").format(
        len(shown), len(nodes)
    ) + table_html(shown, {shown.columns[2]: "{:,.2f}", shown.columns[3]: "{:+.1f}"}, text_columns=("host",))


def stragglers_blocks(data: ReportData) -> list[Markup]:
    """One sentence per configuration of two or more ranks: whether a rank held the others back,
    pooled over its runs (the one definition, `ddpbench.analysis.straggler`)."""
    found = [answer for answer in data.answers if answer.world_size > 1 and answer.straggler is not None]
    if not found:
        return []
    items = [
        Markup('<li><strong>{}</strong>: <span class="{}">{}</span></li>').format(
            answer.name, "status-failed" if answer.straggler.named else "", answer.straggler.sentence()
        )
        for answer in found
    ]
    bases = sorted({_basis(answer.straggler) for answer in found} - {""})
    return [Markup("<ul>") + Markup("").join(items) + Markup("</ul>"), *(note(basis) for basis in bases)]


def cpu_denied_blocks(data: ReportData) -> list[Markup]:
    """One sentence per configuration whose kernel counters were read: how long its ranks waited
    for a core, whose the core was, a CPU quota that held a rank back, and host contention's two
    parts (the one definition, `ddpbench.analysis.cpu_denied`)."""
    items = []
    for answer in data.answers:
        if answer.cpu is None:
            continue
        said = answer.cpu.words()
        parts = contention_parts(answer)
        items.append(
            Markup('<li><strong>{}</strong>: <span class="{}">{}</span>{}</li>').format(
                answer.name,
                "status-failed" if said else "",
                said or "no rank waited for a core beyond noise",
                Markup("; host contention: {}").format(parts) if parts else "",
            )
        )
    if not items:
        return []
    return [
        Markup("<h3>CPU denied</h3><ul>") + Markup("").join(items) + Markup("</ul>"),
        note(
            "What the kernel counted per step (/proc's schedstat): a rank's training thread runnable but waiting "
            f"for a core, named where its 95 % interval lies above {100 * MATERIAL_SHARE:.0f} % of the step. Whose "
            "the core was is an estimate from the processes' CPU time over the window."
        ),
    ]


def _basis(found) -> str:
    source = SOURCES.get(found.source)
    if source is None:
        return ""
    return (
        f"From {source}; the two ranks chosen on one half of the rounds (or steps) and the wait read on the other, "
        "a rank held the others back where the wait's 95 % interval excludes zero."
    )


def ranks_by_host_blocks(data: ReportData) -> list[Markup]:
    """For a run of a few ranks on several hosts (beyond RANK_DETAIL_LIMIT ranks the large-run
    summary has its nodes table): its ranks grouped by the host they ran on, so that a slow node
    or a slow link to one reads as a row."""
    blocks = []
    for _, record in data.records:
        if record.status != "ok" or not record.spec.launched_by_torchrun:
            continue
        per_rank = ranks.rank_frame(record)
        if per_rank.empty or per_rank["host"].nunique() < 2 or len(per_rank) > ranks.RANK_DETAIL_LIMIT:
            continue
        nodes = ranks.node_frame(per_rank)
        members = per_rank.groupby("host")["rank"].apply(lambda found: ", ".join(map(str, sorted(found))))
        steps = per_rank.groupby("host")["step_p50_s"].median() * 1000
        shown = pd.DataFrame(
            {
                "host": nodes["host"],
                "ranks": nodes["host"].map(members),
                "median step p50 (ms)": nodes["host"].map(steps),
                f"median {ranks.measure_name(per_rank)} (ms)": nodes["measure_s"] * 1000,
                "vs median rank (%)": nodes["above_median_pct"],
            }
        )
        blocks.append(Markup("<h3>{}: ranks by host</h3>").format(record.run_id))
        blocks.append(
            table_html(
                shown,
                {column: "{:,.2f}" for column in shown.columns[2:4]} | {shown.columns[4]: "{:+.1f}"},
                text_columns=("host", "ranks"),
            )
        )
    return blocks
