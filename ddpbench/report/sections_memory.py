"""The report's section on memory per rank and on what compiling cost: each strategy's peaks and
model state against DDP's at the same world size and batch, and, for compiled runs, the compile
warm-up, graphs and graph breaks kept apart from step time."""

from __future__ import annotations

import pandas as pd
from markupsafe import Markup

from ddpbench.analysis.frames import MEMORY_CHANGES, MEMORY_LEGEND, MODEL_STATE_LEGEND, change, memory_table
from ddpbench.config.spec import strategy_order
from ddpbench.report.blocks import ReportData, note, table_html


def memory_section(data: ReportData) -> list[Markup]:
    blocks: list[Markup] = []
    found = memory_table(data.table) if not data.table.empty else pd.DataFrame()
    if not found.empty:
        kinds = data.runs["peak_memory_kind"].dropna() if "peak_memory_kind" in data.runs else pd.Series(dtype=str)
        on_gpu = not kinds.empty and kinds.iloc[0] == "cuda_max_memory_allocated"
        blocks.append(
            note(
                "Memory per rank, the largest rank's: each phase's peak and the model state it holds, and two "
                "changes, each against a like run at the same world size and batch. "
                + MODEL_STATE_LEGEND[0].upper()
                + MODEL_STATE_LEGEND[1:]
                + ". "
                + MEMORY_LEGEND[0].upper()
                + MEMORY_LEGEND[1:]
                + ": fsdp2+compile's change vs DDP includes eager fsdp2's own. "
                + (
                    "Peaks are CUDA memory allocated."
                    if on_gpu
                    else "Peaks are each process's resident set on CPU, torch and Python included: a small "
                    "model's savings show in the model state more than in the peaks."
                )
            )
        )
        formats = {c: "{:,.0f}" for c in found.columns if c.endswith(" MiB")}
        formats.update({c: change for c in found.columns if c.endswith(MEMORY_CHANGES)})
        shown = found.rename(columns={"world_size": "world size", "batch_size": "batch / device"})
        blocks.append(table_html(shown, formats, text_columns=("workload", "strategy")))
    compiled = compile_frame(data)
    if not compiled.empty:
        blocks.append(
            note(
                "Compiled runs: a compile warm-up steps one batch until a step compiles nothing; its time, the "
                "graphs and the graph breaks stay out of the step times. A recompile in the timed window would "
                "put compile time into a timed step: the column counts them."
            )
        )
        blocks.append(
            table_html(
                compiled,
                {"first step s": "{:.2f}", "compile s": "{:.2f}", "warm-up s": "{:.2f}"},
                text_columns=("run", "strategy", "stable", "first graph break"),
            )
        )
    return blocks


def compile_frame(data: ReportData) -> pd.DataFrame:
    rows = []
    for _, record in data.records:
        stats = record.compile
        if stats is None:
            continue
        rows.append(
            {
                "run": record.run_id,
                "strategy": record.spec.strategy_name,
                "world size": record.spec.world_size,
                "warm-up steps": stats.warmup_steps,
                "stable": "yes" if stats.stable else "no: still compiling",
                "first step s": stats.first_step_s,
                "compile s": stats.compile_s,
                "warm-up s": stats.warmup_s,
                "graphs": stats.graphs,
                "backward graphs": stats.backward_graphs,
                "graph breaks": stats.graph_breaks,
                "recompiles in window": stats.recompiles_in_window,
                "first graph break": stats.graph_break_reasons[0] if stats.graph_break_reasons else "",
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.sort_values(
        ["strategy", "world size"], key=lambda c: c.map(strategy_order) if c.name == "strategy" else c
    ).reset_index(drop=True)
