"""Figures for the report, drawn from the analysis DataFrames. One function per figure; each
returns a matplotlib Figure with one panel per workload. No torch.

Colour-blind-safe palette (seaborn "colorblind"); every axis says what it measures and in what unit.
"""

from __future__ import annotations

import io
import math
import warnings

import matplotlib

matplotlib.use("Agg")  # files only, no display: works on servers and in CI

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from ddpbench.config.spec import strategy_order  # noqa: E402

PALETTE = sns.color_palette("colorblind")
STRATEGY_COLOURS = {
    "local": PALETTE[2],
    "ddp": PALETTE[0],
    "dp": PALETTE[1],
    "fsdp2": PALETTE[3],
    "replicate": PALETTE[4],
}
STRATEGY_NAMES = {
    "local": "local (reference)",
    "ddp": "DDP",
    "dp": "DataParallel",
    "fsdp2": "FSDP2",
    "replicate": "replicate",
}
SHORT_NAMES = {"local": "local", "ddp": "DDP", "dp": "DP", "fsdp2": "FSDP2", "replicate": "repl"}
# A compiled run keeps its strategy's colour, drawn dashed (compile) or dotted (compiled autograd).
COMPILE_LINES = {"": "-", "compile": "--", "compiled-autograd": ":"}
PANEL_WIDTH_IN, PANEL_HEIGHT_IN = 5.0, 3.4
DPI = 110

sns.set_theme(style="whitegrid", palette=PALETTE, font_scale=0.9)


def colour(name: str):
    """A strategy's colour, as tables name it (`ddp`, `ddp+compile`)."""
    return STRATEGY_COLOURS.get(name.partition("+")[0], PALETTE[7])


def display_name(name: str, names: dict = STRATEGY_NAMES) -> str:
    base, _, mode = name.partition("+")
    if mode:  # a compiled local run is no reference
        return f"{'local' if base == 'local' else names.get(base, base)} ({mode})"
    return names.get(base, base)


def line_style(name: str) -> str:
    return COMPILE_LINES.get(name.partition("+")[2], "-")


def scaled_strategies(rows: pd.DataFrame) -> list[str]:
    """The strategies drawn as lines over world size: all but the local reference, in table order."""
    return sorted((s for s in rows["strategy"].unique() if s != "local"), key=strategy_order)


def panels(workloads: list[str]):
    """A grid with one panel per workload, at most two across so it fits a laptop screen."""
    columns = min(2, max(1, len(workloads)))
    rows = math.ceil(len(workloads) / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(PANEL_WIDTH_IN * columns, PANEL_HEIGHT_IN * rows), squeeze=False
    )
    flat = list(axes.flat)
    for unused in flat[len(workloads) :]:
        unused.set_visible(False)
    return figure, dict(zip(workloads, flat))


def row_panels(workloads: list[str]):
    """Small panels, up to four across: the report's body keeps to a few screens."""
    columns = min(4, max(1, len(workloads)))
    rows = math.ceil(len(workloads) / columns)
    figure, grid = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.7 * rows), squeeze=False)
    flat = list(grid.flat)
    for unused in flat[len(workloads) :]:
        unused.set_visible(False)
    return figure, dict(zip(workloads, flat))


def _world_size_axis(axis, sizes) -> None:
    sizes = sorted(set(int(s) for s in sizes))
    axis.set_xscale("log", base=2)
    axis.set_xticks(sizes, [str(s) for s in sizes])
    axis.minorticks_off()
    axis.set_xlabel("world size (devices)")


def throughput(table: pd.DataFrame) -> plt.Figure:
    """Throughput against world size, with the ideal line from the local run; DataParallel on CPU
    is left out (`comparable`)."""
    figure, axes = panels(sorted(table["workload"].unique()))
    for workload, axis in axes.items():
        rows = comparable(table[table["workload"] == workload])
        unit = rows["sample_unit"].iloc[0]
        for strategy in scaled_strategies(rows):
            line = rows[rows["strategy"] == strategy].sort_values("world_size")
            if not line.empty:
                axis.plot(
                    line["world_size"],
                    line["throughput"],
                    marker="o",
                    color=colour(strategy),
                    linestyle=line_style(strategy),
                    label=display_name(strategy),
                )
        local = rows[rows["strategy"] == "local"]
        if not local.empty:
            x1 = local["throughput"].iloc[0]
            sizes = sorted(rows["world_size"].unique())
            axis.plot(sizes, [x1 * n for n in sizes], linestyle="--", color="grey", label="ideal: N x local")
            axis.plot(
                [1], [x1], marker="s", color=STRATEGY_COLOURS["local"], linestyle="", label=STRATEGY_NAMES["local"]
            )
        _finish_scaling_axis(axis, rows, workload, f"throughput ({unit}/s)")
    figure.tight_layout()
    return figure


def _finish_scaling_axis(axis, rows: pd.DataFrame, workload: str, ylabel: str) -> None:
    _world_size_axis(axis, rows["world_size"])
    axis.set_ylabel(ylabel)
    axis.set_ylim(bottom=0)
    axis.set_title(workload)
    handles, _ = axis.get_legend_handles_labels()
    if len(handles) > 5:  # many strategies: the legend beside the panel, not over its lines
        axis.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    else:
        axis.legend(fontsize="small")


def comparable(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows without DataParallel on CPU: one process with N times the threads replicates nothing,
    so its efficiency is no rival to DDP's and is not drawn as one."""
    return rows[~rows["strategy_label"].astype(str).str.startswith("DataParallel on CPU")]


def efficiency(table: pd.DataFrame) -> plt.Figure:
    """E(N) against world size, one panel per workload in a row, each point with its 95 % interval
    over the configuration's runs."""
    figure, axes = row_panels(sorted(table["workload"].unique()))
    for workload, axis in axes.items():
        rows = comparable(table[table["workload"] == workload])
        for strategy in scaled_strategies(rows):
            line = rows[rows["strategy"] == strategy].dropna(subset=["efficiency"]).sort_values("world_size")
            if line.empty:
                continue
            low = (line["efficiency"] - line["efficiency_low"]).fillna(0).clip(lower=0)
            high = (line["efficiency_high"] - line["efficiency"]).fillna(0).clip(lower=0)
            axis.errorbar(
                line["world_size"],
                100 * line["efficiency"],
                yerr=[100 * low, 100 * high],
                marker="o",
                capsize=3,
                color=colour(strategy),
                linestyle=line_style(strategy),
                label=display_name(strategy),
            )
        axis.axhline(100, linestyle="--", color="grey", label="ideal (100 %)")
        _world_size_axis(axis, table[table["workload"] == workload]["world_size"])
        axis.set_ylabel("E(N) (%)")
        axis.set_ylim(0, max(110, axis.get_ylim()[1]))
        axis.set_title(workload)
        axis.legend(fontsize="x-small")
    figure.tight_layout()
    return figure


def step_time_by_rank(step_times: pd.DataFrame) -> plt.Figure:
    """DDP runs: each rank's step-time distribution at each world size, so a slow rank stands out."""
    ddp = step_times[step_times["strategy"] == "ddp"].assign(step_time_ms=lambda f: f["step_time_s"] * 1000)
    figure, axes = row_panels(sorted(ddp["workload"].unique()))
    for workload, axis in axes.items():
        rows = ddp[ddp["workload"] == workload]
        ranks = rows["rank"].nunique()
        with warnings.catch_warnings():
            # seaborn 0.13 still passes matplotlib's deprecated `vert`; nothing for a reader to act on.
            warnings.filterwarnings("ignore", message=".*vert.*", category=DeprecationWarning)
            sns.boxplot(
                data=rows,
                x="world_size",
                y="step_time_ms",
                hue="rank",
                ax=axis,
                fliersize=2,
                palette=sns.color_palette("colorblind", ranks),
                legend=ranks <= 8,
            )
        axis.set_xlabel("world size (devices)")
        axis.set_ylabel("step time (ms)")
        axis.set_title(f"{workload}: step time per rank")
        if axis.get_legend() is not None:
            axis.legend(title="rank", fontsize="x-small", title_fontsize="x-small")
    figure.tight_layout()
    return figure


def rank_heat_map(binned, bin_width: int, title: str) -> plt.Figure:
    """A run's ranks x steps as colour: a slow rank is a bright row, a slow moment a bright column.
    The colour scale stops at the 1st and 99th percentiles so one outlier cannot wash out the rest."""
    ms = binned * 1000
    low, high = np.percentile(ms, [1, 99])
    figure, axis = plt.subplots(figsize=(2 * PANEL_WIDTH_IN, PANEL_HEIGHT_IN * 1.3))
    image = axis.imshow(
        ms,
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        vmin=low,
        vmax=max(high, low + 1e-9),
        origin="lower",
        extent=(0, ms.shape[1] * bin_width, -0.5, ms.shape[0] - 0.5),
    )
    figure.colorbar(image, ax=axis, label="step time (ms)" + (f", mean of {bin_width} steps" if bin_width > 1 else ""))
    axis.set_xlabel("timed step")
    axis.set_ylabel("rank")
    axis.grid(False)
    axis.set_title(title)
    figure.tight_layout()
    return figure


def step_bands(bands: pd.DataFrame, title: str) -> plt.Figure:
    """Per step, the spread over ranks: median, the p90-p99 band and the slowest rank."""
    figure, axis = plt.subplots(figsize=(2 * PANEL_WIDTH_IN, PANEL_HEIGHT_IN))
    steps = bands.index.to_numpy()
    axis.fill_between(
        steps,
        bands["min_s"] * 1000,
        bands["max_s"] * 1000,
        color=PALETTE[0],
        alpha=0.15,
        linewidth=0,
        label="fastest to slowest rank",
    )
    axis.fill_between(
        steps,
        bands["p90_s"] * 1000,
        bands["p99_s"] * 1000,
        color=PALETTE[0],
        alpha=0.35,
        linewidth=0,
        label="p90 to p99 of ranks",
    )
    axis.plot(steps, bands["p50_s"] * 1000, color=PALETTE[0], linewidth=1, label="median rank")
    axis.set_xlabel("timed step")
    axis.set_ylabel("step time (ms)")
    axis.set_ylim(bottom=0)
    axis.set_title(title)
    axis.legend(fontsize="x-small", loc="lower right")
    figure.tight_layout()
    return figure


def rank_spread(spread: pd.DataFrame, workload_of: dict) -> plt.Figure:
    """DDP runs: the spread of the ranks' median step times against world size (log 2 axis)."""
    spread = spread.assign(workload=spread["run_id"].map(workload_of))
    figure, axes = panels(sorted(spread["workload"].unique()))
    for workload, axis in axes.items():
        rows = spread[spread["workload"] == workload].groupby("world_size").median(numeric_only=True).reset_index()
        for column, label, style in (
            ("p50_s", "median rank", "-"),
            ("p90_s", "p90 of ranks", "--"),
            ("max_s", "slowest rank", ":"),
            ("iteration_p50_s", "iteration (median step)", "-."),
        ):
            axis.plot(rows["world_size"], rows[column] * 1000, marker="o", linestyle=style, label=label)
        _world_size_axis(axis, rows["world_size"])
        axis.set_ylabel("median step time (ms)")
        axis.set_ylim(bottom=0)
        axis.set_title(f"{workload}: DDP ranks' median step time")
        axis.legend(fontsize="x-small")
    figure.tight_layout()
    return figure


def iteration_over_steps(iterations: pd.DataFrame) -> plt.Figure:
    figure, axes = panels(sorted(iterations["workload"].unique()))
    for workload, axis in axes.items():
        rows = iterations[iterations["workload"] == workload]
        for (strategy, world_size), run in rows.groupby(["strategy", "world_size"]):
            axis.plot(
                run["step"],
                run["iteration_time_s"] * 1000,
                color=colour(strategy),
                alpha=0.35 + 0.65 * world_size / rows["world_size"].max(),
                linewidth=1,
                label=f"{display_name(strategy)} x{world_size}",
            )
        axis.set_xlabel("timed step")
        axis.set_ylabel("iteration time (ms)")
        axis.set_ylim(bottom=0)
        axis.set_title(workload)
        axis.legend(fontsize="x-small", ncol=2)
    figure.tight_layout()
    return figure


BREAKDOWN_LABELS = {
    "compute_us": "compute",
    "exposed_comm_us": "exposed communication",
    "other_us": "other",
    "idle_us": "idle",
}


def step_breakdown(breakdown: pd.DataFrame) -> plt.Figure:
    """Where a profiled step's time goes, per run: stacked compute / exposed communication / other / idle."""
    figure, axes = panels(sorted(breakdown["workload"].unique()))
    colours = [PALETTE[0], PALETTE[3], PALETTE[7], PALETTE[5]]
    for workload, axis in axes.items():
        rows = breakdown[breakdown["workload"] == workload].sort_values(["strategy", "world_size"])
        labels = [f"{display_name(s, SHORT_NAMES)} x{n}" for s, n in zip(rows["strategy"], rows["world_size"])]
        bottom = pd.Series(0.0, index=rows.index)
        for part, colour in zip(BREAKDOWN_LABELS, colours):
            values = rows[part] / 1000
            axis.bar(labels, values, bottom=bottom, color=colour, label=BREAKDOWN_LABELS[part])
            bottom = bottom + values
        axis.set_ylabel("time per profiled step (ms)")
        axis.set_title(workload)
        axis.tick_params(axis="x", labelsize="small", labelrotation=30)
        axis.legend(fontsize="x-small")
    figure.tight_layout()
    return figure


def png_bytes(figure: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    plt.close(figure)
    return buffer.getvalue()


def history(series: pd.DataFrame) -> plt.Figure:
    """Throughput of each configuration over the stored history, change points as dashed lines and
    each segment's mean as a flat line (columns: configuration, position, throughput, segment, change)."""
    figure, axes = panels(list(dict.fromkeys(series["configuration"])))
    for configuration, axis in axes.items():
        rows = series[series["configuration"] == configuration]
        axis.plot(
            rows["position"],
            rows["throughput"],
            marker="o",
            markersize=3,
            linewidth=1,
            color=PALETTE[0],
            label="one run",
        )
        for _, segment in rows.groupby("segment"):
            axis.hlines(
                segment["throughput"].mean(),
                segment["position"].min(),
                segment["position"].max(),
                color=PALETTE[2],
                linewidth=2,
                label="segment mean",
            )
        for position in rows.loc[rows["change"], "position"]:
            axis.axvline(position - 0.5, color=PALETTE[3], linestyle="--", linewidth=1.2, label="change point")
        handles, labels = axis.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        axis.legend(unique.values(), unique.keys(), fontsize="x-small")
        axis.set_xlabel("run in the history (oldest first)")
        axis.set_ylabel("throughput (workload's unit / s)")
        axis.set_ylim(bottom=0)
        axis.set_title(configuration, fontsize="small")
    figure.tight_layout()
    return figure
