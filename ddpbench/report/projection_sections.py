"""Report sections built on `ddpbench project`: projection against measurement, and projection
beyond this machine. No torch. Every number here is marked as a projection unless it was measured.

The network profile is the one given to `ddpbench report --profile`, else the sweep's own
`comm/profile.json` (what `ddpbench comm --out <sweep>/comm` writes), else these sections say how
to get one.
"""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import pandas as pd
from markupsafe import Markup

from ddpbench.analysis.answers import reference_throughput
from ddpbench.analysis.network import ProfileError, load_profile
from ddpbench.analysis.projection import ProjectionError, RunModel, WhatIf, project
from ddpbench.analysis.projection_validation import validation_cases
from ddpbench.config.spec import DEFAULT_BUCKET_CAP_MB
from ddpbench.report.plots import PALETTE

BEYOND_WORLD_SIZES = (8, 64, 512)


def report_profile(sweep_dir: str, chosen: str | None) -> dict | None:
    own = os.path.join(sweep_dir, "comm", "profile.json")
    if chosen is None and not os.path.exists(own):
        return None
    try:
        return load_profile(chosen or own)
    except ProfileError:
        if chosen:
            raise
        return None


class Blocks:
    """The report's block makers (table_html, figure_html, note), handed in by the report so this
    module does not import it back."""

    def __init__(self, table_html, figure_html, note):
        self.table_html, self.figure_html, self.note = table_html, figure_html, note


def _no_profile(html: Blocks) -> list[Markup]:
    return [
        html.note(
            "No network profile: pass ddpbench report --profile FILE|PRESET, or measure one into the "
            "sweep with ddpbench comm --out <sweep>/comm."
        )
    ]


def projection_vs_measurement_section(data, html: Blocks) -> list[Markup]:
    if data.profile is None:
        return []
    cases = validation_cases([record for _, record in data.records], data.profile)
    if not any(case["kind"] == "what-if" for case in cases):
        return []
    frame = pd.DataFrame(
        [
            {
                "workload": c["workload"],
                "case": c["case"],
                "projected from": ", ".join(c["sources"]),
                "measured runs": ", ".join(c["targets"]),
                "projected step (ms)": c["projected_s"] * 1e3,
                "from parts alone (ms)": c["modelled_s"] * 1e3,
                "measured step (ms)": c["measured_s"] * 1e3,
                "error": c["error"],
                "timeline DDP steps (ms)": c["timeline_step_s"] * 1e3,
                "spread of the default runs": c["spread"],
            }
            for c in cases
        ]
    )
    what_ifs = frame[[c["kind"] == "what-if" for c in cases]]
    anchored = sum(c["anchored"] for c in cases if c["kind"] == "what-if")
    anchoring = (
        "A what-if is anchored on its default run's measured step: that step plus what the replay says the "
        "knob changes."
        if anchored
        else "No what-if is anchored on its run's measured step (the profile is not of the runs' backend), so the "
        "projected step is the replay from parts."
    )
    blocks = [
        html.note(
            f"Each measured DDP run with the default knobs is replayed with ddpbench project on profile "
            f"{data.profile.get('name')} ({data.profile.get('source')}), as itself and with the bucket cap "
            "or comm hook of every other run of the same setting; measured = the median iteration time "
            "(the median over the runs, and over the projections from each default run, where there "
            f"are several). {anchoring} A replay of the run itself is from its parts alone "
            "(anchored, it would be the measurement), and tests the model. "
            f"Mean absolute error of the what-ifs: {what_ifs['error'].abs().mean():.1%} over "
            f"{len(what_ifs)} cases. Spread of the default runs: (max - min) / median of their "
            "median iteration times. Timeline DDP steps: the measured runs' own DDP steps in their "
            "gradient timeline, each after a barrier and an unmarked DDP step (as a timed step follows "
            "one), at the end of the run (after the profiled and no_sync phases). For a replay of "
            "the run itself these are the steps its parts come from, so the replay from parts is best "
            "compared with them, and the measured step with them shows how far the machine moved in "
            "between; for a what-if they are the steps of the runs with the knob."
        )
    ]
    blocks.append(
        html.table_html(
            frame,
            {
                "projected step (ms)": "{:.1f}",
                "from parts alone (ms)": "{:.1f}",
                "measured step (ms)": "{:.1f}",
                "timeline DDP steps (ms)": "{:.1f}",
                "error": "{:+.1%}",
                "spread of the default runs": "{:.1%}",
            },
            text_columns=("workload", "case", "projected from", "measured runs"),
        )
    )
    return blocks


def _sources(records) -> dict[str, object]:
    """Per workload, the DDP run with a timeline at the largest world size, default knobs first."""
    chosen = {}
    for _, record in records:
        if record.status != "ok" or record.spec.strategy != "ddp" or record.timeline is None or not record.metrics:
            continue
        key = record.spec.workload
        knobs = record.spec.ddp
        rank = (record.spec.world_size, knobs.comm_hook == "allreduce", knobs.bucket_cap_mb == DEFAULT_BUCKET_CAP_MB)
        if key not in chosen or rank > chosen[key][0]:
            chosen[key] = (rank, record)
    return {workload: record for workload, (_, record) in sorted(chosen.items())}


def beyond_this_machine_section(data, html: Blocks) -> list[Markup]:
    if data.profile is None:
        return _no_profile(html)
    rows = []
    for workload, record in _sources(data.records).items():
        for world in BEYOND_WORLD_SIZES:
            try:
                what = WhatIf(
                    world_size=world,
                    bucket_cap_mb=record.spec.ddp.bucket_cap_mb,
                    comm_hook=record.spec.ddp.comm_hook,
                    gradient_as_bucket_view=record.spec.ddp.gradient_as_bucket_view,
                )
                result = project(record, data.profile, what, *reference_throughput(record, data.records))
            except (ProjectionError, ProfileError):
                continue
            rows.append(
                {
                    "workload": workload,
                    "projected from": record.run_id,
                    "world size": world,
                    "unit": RunModel(record).sample_unit,
                    "throughput (/s)": result.throughput,
                    "low": result.throughput_low,
                    "high": result.throughput_high,
                    "efficiency": result.efficiency,
                    "efficiency low": result.efficiency_low,
                    "efficiency high": result.efficiency_high,
                    "exposed comm (ms)": result.exposed_comm_s * 1e3,
                    "basis": result.basis,
                    "efficiency against": result.efficiency_reference,
                    "anchored": "no"
                    if result.unexplained_s is None
                    else f"{result.unexplained_s * 1e3:+.2f} ms the replay misses of the measured step",
                }
            )
    if not rows:
        return [html.note("No DDP run with a gradient timeline (runs need profiling on) to project from.")]
    frame = pd.DataFrame(rows)
    return [
        Markup("<p><strong>PROJECTION, not measured.</strong> ")
        + Markup.escape(
            f"Each workload's DDP run replayed by ddpbench project for {', '.join(map(str, BEYOND_WORLD_SIZES))} "
            f"devices on profile {data.profile.get('name')}: {data.profile.get('source')}. Compute is this machine's, "
            "as measured; only communication changes. On a profile of the run's own backend a projection is "
            "anchored on the run's measured step (what the replay from parts misses of it is added, assumed the "
            "same at every world size); on another backend's it is the replay alone. Efficiency is against the "
            "scaling table's X(1), the sweep's local run, where the sweep has one (else one device without DDP "
            "from the run's no_sync steps, as the table's last column says); the band comes from the profile's "
            "fit (or its stated uncertainty)."
        )
        + Markup("</p>"),
        html.figure_html(
            beyond_figure(frame),
            "Line charts of projected throughput against world size 8, 64 and "
            "512 with a shaded band, one line per workload.",
            "Projected throughput (shaded: the band from the network profile). A projection, not a measurement.",
        ),
        html.table_html(
            frame,
            {
                "throughput (/s)": "{:,.1f}",
                "low": "{:,.1f}",
                "high": "{:,.1f}",
                "efficiency": "{:.1%}",
                "efficiency low": "{:.1%}",
                "efficiency high": "{:.1%}",
                "exposed comm (ms)": "{:.2f}",
            },
            text_columns=("workload", "projected from", "unit", "basis", "anchored", "efficiency against"),
        ),
    ]


def beyond_figure(frame: pd.DataFrame) -> plt.Figure:
    figure, axis = plt.subplots(figsize=(6.4, 3.6))
    for colour, (workload, rows) in zip(PALETTE, frame.groupby("workload")):
        axis.plot(
            rows["world size"], rows["throughput (/s)"], marker="o", color=colour, label=f"{workload} (projected)"
        )
        axis.fill_between(rows["world size"], rows["low"], rows["high"], color=colour, alpha=0.2)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(list(BEYOND_WORLD_SIZES), [str(s) for s in BEYOND_WORLD_SIZES])
    axis.minorticks_off()
    axis.set_xlabel("world size (devices)")
    axis.set_ylabel("throughput (workload unit/s)")
    axis.set_title("PROJECTION: throughput beyond this machine")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure
