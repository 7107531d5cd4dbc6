"""Figures of the collective benchmark and of projections. No torch."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ddpbench.analysis.network import BUS_FACTORS, GB
from ddpbench.records.store import write_atomic
from ddpbench.report.plots import PALETTE, png_bytes


def bandwidth_figure(results: dict, profile: dict | None = None) -> plt.Figure:
    """Bus bandwidth against message size, one line per collective and element type, with the
    alpha-beta fit dashed."""
    figure, axis = plt.subplots(figsize=(6.4, 3.8))
    world = results["world_size"]
    lines = list(dict.fromkeys((r["collective"], r.get("dtype", "float32")) for r in results["results"]))
    for colour, (collective, dtype) in zip(PALETTE * 4, lines):
        rows = [r for r in results["results"] if (r["collective"], r.get("dtype", "float32")) == (collective, dtype)]
        sizes = [r["bytes"] for r in rows]
        axis.plot(
            sizes,
            [r["busbw_bytes_per_s"] / GB for r in rows],
            marker="o",
            markersize=3,
            color=colour,
            label=collective.replace("_", " ") + ("" if dtype == "float32" else f" {dtype}"),
        )
        fit = next(
            (
                f
                for f in (profile or {}).get("fits", [])
                if f["collective"] == collective and f.get("dtype", "float32") == dtype
            ),
            None,
        )
        if fit:
            fitted = [
                s / (fit["alpha_s"] + fit["beta_s_per_byte"] * s) * BUS_FACTORS[collective](world) / GB for s in sizes
            ]
            axis.plot(sizes, fitted, linestyle="--", linewidth=1, color=colour)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("message size (bytes)")
    axis.set_ylabel("bus bandwidth (GB/s)")
    axis.set_title(f"{results['backend']}, {world} x {results['device']} (dashed: alpha-beta fit)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def save_png(figure: plt.Figure, path: str) -> None:
    write_atomic(path, png_bytes(figure))
