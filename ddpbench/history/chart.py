"""A time-series chart as inline SVG text, drawn here so a page of many charts stays light: one
polyline per series, one linked dot per run (its details in the dot's tooltip), dashed lines at
change points with each segment's mean as a flat line. No torch, no plotting library.

The x axis is shared by every chart of a page (`TimeAxis`), so the same night sits at the same
place in every configuration's chart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

WIDTH, HEIGHT = 600, 190
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 18, 26
LABEL_GAP = 46
"""pixels between two change labels; a closer one keeps its line and tooltip, not its label"""


@dataclass(frozen=True)
class ChartPoint:
    x: float
    """position on the page's shared axis (seconds since 1970, or the run's number)"""
    value: float
    link: str
    tooltip: str


@dataclass(frozen=True)
class ChangeMark:
    x: float
    label: str
    """shown at the top of the line, space allowing (the change of the segment means)"""
    tooltip: str


def parse_time(text: str) -> float | None:
    """Seconds since 1970 of an ISO 8601 time (one without a zone is taken as UTC); None if unreadable."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True)
class TimeAxis:
    """The x range every chart of the page shares; `by_time` False: runs numbered 1, 2, ... (some
    run of the store has no readable end time)."""

    low: float
    high: float
    by_time: bool

    def place(self, x: float) -> float:
        span = self.high - self.low
        share = (x - self.low) / span if span > 0 else 0.5
        return LEFT + share * (WIDTH - LEFT - RIGHT)

    def ticks(self) -> list[tuple[float, str]]:
        if not self.by_time:
            return [(value, f"run {value:g}") for value in nice_ticks(self.low, self.high, 6) if value == int(value)]
        return calendar_ticks(self.low, self.high)


DAY = 86400.0
MOST_TICKS = 6


def calendar_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """Dates to mark between two times: midnights a whole number of days apart, or the first days
    of months (a month, a quarter, a year apart) over a longer span; at most MOST_TICKS of them."""
    start = datetime.fromtimestamp(low, UTC)
    if high - low < DAY:
        return [(low, start.strftime("%Y-%m-%d"))]
    for days in (1, 2, 3, 7, 14):
        first = math.ceil(low / DAY) * DAY
        moments = [first + i * days * DAY for i in range(int((high - first) // (days * DAY)) + 1)]
        if len(moments) <= MOST_TICKS:
            return [(m, datetime.fromtimestamp(m, UTC).strftime("%Y-%m-%d")) for m in moments]
    for months in (1, 2, 3, 6, 12, 24, 60):
        moments, year, month = [], start.year, start.month
        while True:
            month += 1
            year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
            moment = datetime(year, month, 1, tzinfo=UTC)
            if moment.timestamp() > high:
                break
            if (year * 12 + month - 1) % months == 0:
                moments.append(moment)
        if len(moments) <= MOST_TICKS:
            return [(m.timestamp(), m.strftime("%Y-%m")) for m in moments]
    return [(low, start.strftime("%Y-%m-%d"))]


def nice_ticks(low: float, high: float, wanted: int = 5) -> list[float]:
    """Round values (1, 2, 2.5 or 5 times a power of ten apart) covering low..high."""
    if not high > low:
        return [low]
    raw = (high - low) / max(wanted - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        if value >= low - step * 1e-9:
            ticks.append(round(value, 12))
        value += step
    return ticks


def _value_range(values: list[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    return low - pad, high + pad


def line_chart(
    axis: TimeAxis,
    points: list[ChartPoint],
    changes: list[ChangeMark],
    segments: list[tuple[float, float, float]],
    label: str,
    tick_text,
) -> str:
    """One chart: `points` oldest first, `segments` as (first x, last x, mean), `tick_text`
    formats a value on the y axis. `label` names the chart for screen readers."""
    low, high = _value_range([p.value for p in points])

    def y_of(value: float) -> float:
        return TOP + (high - value) / (high - low) * (HEIGHT - TOP - BOTTOM)

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}">',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{HEIGHT - TOP - BOTTOM}"/>',
    ]
    for value in nice_ticks(low, high):
        y = y_of(value)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="y" x="{LEFT - 5}" y="{y + 3.5:.1f}">{escape(tick_text(value))}</text>')
    for x, text in axis.ticks():
        at = axis.place(x)
        # A label near an edge of the plot is kept inside it rather than cut off.
        anchor = "start" if at < LEFT + 30 else "end" if at > WIDTH - RIGHT - 30 else "middle"
        parts.append(f'<line class="grid" x1="{at:.1f}" x2="{at:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>')
        parts.append(f'<text class="x" x="{at:.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}">{escape(text)}</text>')
    means = [
        f'<line class="mean" x1="{axis.place(first):.1f}" x2="{axis.place(last):.1f}" '
        f'y1="{y_of(mean):.1f}" y2="{y_of(mean):.1f}"/>'
        for first, last, mean in segments
    ]
    shown_at = -math.inf
    for change in changes:
        x = axis.place(change.x)
        parts.append(
            f'<g class="change"><title>{escape(change.tooltip)}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
        )
        if x - shown_at >= LABEL_GAP:
            anchor = "end" if x > WIDTH - RIGHT - LABEL_GAP / 2 else "start"
            at = x - 3 if anchor == "end" else x + 3
            parts.append(f'<text x="{at:.1f}" y="{TOP - 5}" text-anchor="{anchor}">{escape(change.label)}</text>')
            shown_at = x
        parts.append("</g>")
    coordinates = " ".join(f"{axis.place(p.x):.1f},{y_of(p.value):.1f}" for p in points)
    parts.append(f'<polyline class="line" points="{coordinates}"/>')
    # Dots shrink as runs crowd together, so a year of nights still shows its line.
    radius = min(max((WIDTH - LEFT - RIGHT) / len(points) / 2.5, 1.1), 2.6)
    for point in points:
        parts.append(
            f'<a href="{escape(point.link)}"><circle cx="{axis.place(point.x):.1f}" cy="{y_of(point.value):.1f}" '
            f'r="{radius:.1f}"><title>{escape(point.tooltip)}</title></circle></a>'
        )
    # The segment means go over the dots: they are what the gate compares with.
    parts += means
    parts.append("</svg>")
    return "".join(parts)
