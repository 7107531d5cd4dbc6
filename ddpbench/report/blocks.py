"""What the report's sections are made of: the data they draw from (`ReportData`, computed once)
and their blocks: tables (pandas Stylers, every cell and heading HTML-escaped), figures embedded as
PNG data URIs, and notes."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pandas as pd
from markupsafe import Markup, escape

from ddpbench.analysis import registry
from ddpbench.records.schema import Record
from ddpbench.report import plots


@dataclass
class ReportData:
    """Everything a section may draw from, computed once."""

    records: list[tuple[str, Record]]
    unreadable: list[tuple[str, str]]
    runs: pd.DataFrame
    table: pd.DataFrame
    report_dir: str
    profile: dict | None = None
    """Network profile for the projection sections (ddpbench report --profile)."""
    answers: list = field(default_factory=list)
    """One answer per configuration of DDP runs, pooled over its runs (`ddpbench.analysis.answers`)."""
    problems: list[str] = field(default_factory=list)
    """Runs that could not be answered, and why."""


def metric_columns(frame: pd.DataFrame, names: list[str]) -> tuple[pd.DataFrame, dict[str, str]]:
    """The registry's metrics among `names`, scaled for display and renamed to their headings."""
    shown, formats = frame.copy(), {}
    for metric in registry.METRICS:
        if metric.name in names and metric.name in shown.columns:
            heading = metric.heading().replace("unit/s", "/s")
            shown[heading] = shown.pop(metric.name) * metric.scale
            formats[heading] = metric.fmt
    return shown, formats


def table_html(frame: pd.DataFrame, formats: dict[str, str] | None = None, text_columns: tuple = ()) -> Markup:
    """A DataFrame as a table through pandas' Styler: numbers formatted per column, blanks for
    missing values, every cell and heading HTML-escaped, status cells coloured by class."""
    formats = {column: fmt for column, fmt in (formats or {}).items() if column in frame.columns}
    classes = pd.DataFrame("", index=frame.index, columns=frame.columns)
    for column in frame.columns:
        if column in text_columns:
            classes[column] = "text"
        if column == "status":
            classes[column] = "text status-" + frame[column].astype(str).map(lambda v: str(escape(v)))
    styler = (
        frame.style.format(formats, na_rep="", escape="html")
        .format_index(escape="html", axis=1)
        .hide(axis="index")
        .set_td_classes(classes)
    )
    return Markup(f'<div class="table-wrap">{styler.to_html()}</div>')


def figure_html(figure, alt: str, caption: str) -> Markup:
    # Never wider than drawn: a one-panel figure stays panel-sized instead of filling the page.
    width_px = int(figure.get_figwidth() * plots.DPI)
    data = base64.b64encode(plots.png_bytes(figure)).decode("ascii")
    return Markup(
        f'<figure><img src="data:image/png;base64,{data}" alt="{escape(alt)}" '
        f'style="max-width: {width_px}px"><figcaption>{escape(caption)}</figcaption></figure>'
    )


def note(text: str) -> Markup:
    return Markup(f'<p class="note">{escape(text)}</p>')
