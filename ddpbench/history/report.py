"""`ddpbench history report`: one self-contained HTML page of a history store, a picture first and
then a table. For every configuration (machine class, suite and run key) its throughput and scaling
efficiency over time, with the change points the gate uses marked; then one compact table. A small
script on the page filters both by workload and machine class, with no server and nothing loaded
from anywhere (CSS, script and charts are inline). No torch.

Change points are those of the throughput series (`ddpbench.gate.changepoints`, as in `history
changes` and `gate --baseline history`); the efficiency chart marks the same ones, since the gate
takes every measure since the throughput's last change point. The store keeps no gate verdicts, and
the page says so rather than guess them. Before the table, the hosts section: the hosts and devices
that held the slowest rank beyond chance (`ddpbench history hosts`, over its default window), with
every host tested.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from html import escape
from urllib.parse import quote

from ddpbench.gate.changepoints import MIN_POINTS, change_points
from ddpbench.history.chart import ChangeMark, ChartPoint, TimeAxis, line_chart, parse_time
from ddpbench.history.store import HistoryRun, Store

DEFAULT_OUT = os.path.join("reports", "history")
RESULTS = "results"
"""where sweeps are kept (results/<sweep>/), the page's links relative to it"""


@dataclass
class Configuration:
    """One configuration's history on one machine class and suite, oldest run first, and the
    indices of its runs where a change point starts a new segment."""

    machine_class: str
    suite: str
    key: tuple
    name: str
    runs: list[HistoryRun]
    changes: list[int]

    @property
    def workload(self) -> str:
        return str(self.key[0]) if self.key else ""

    def segments(self) -> list[list[HistoryRun]]:
        edges = [0, *self.changes, len(self.runs)]
        return [self.runs[a:b] for a, b in zip(edges, edges[1:]) if b > a]


def read_configurations(store: Store) -> tuple[list[Configuration], str]:
    """Every configuration of the store with its change points, and the change-point method in
    words. A store without runs is refused (StoreError)."""
    found = []
    for machine, suite in store.places():
        for one in store.series(machine, suite):
            found.append(Configuration(machine, suite, tuple(one.key), one.configuration, one.runs, []))
    found.sort(key=lambda one: (one.machine_class, one.suite, _key_order(one.key)))
    if not found:
        raise store.address.error("holds no runs; add sweeps with: ddpbench history add SWEEP_DIR --store URL")
    points, method = change_points(
        {index: [run.values["throughput"] for run in one.runs] for index, one in enumerate(found)}
    )
    for index, one in enumerate(found):
        one.changes = list(points[index])
    return found, method


def _key_order(key: tuple) -> tuple:
    """Numbers as numbers (x2 before x16), everything else as text."""
    return tuple((0, part, "") if isinstance(part, int | float) else (1, 0, str(part)) for part in key)


def _mean(runs: list[HistoryRun], measure: str) -> float | None:
    values = [run.values[measure] for run in runs if run.values.get(measure) is not None]
    return statistics.fmean(values) if values else None


def _change(before: float | None, after: float | None) -> str:
    if not before or after is None:
        return ""
    return f"{(after / before - 1) * 100:+.1f} %".replace("-", "\u2212")


def _throughput_text(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3g} M"
    if value >= 1e4:
        return f"{value / 1e3:.3g} k"
    return f"{value:.4g}"


def _percent_text(value: float) -> str:
    return f"{value * 100:.3g} %"


def _day(run: HistoryRun) -> str:
    return run.ended_at[:10] if run.ended_at else "time unknown"


def _axis(configurations: list[Configuration]) -> tuple[TimeAxis, dict[int, float]]:
    """The shared x axis and each run's place on it (by run identity)."""
    runs = [run for one in configurations for run in one.runs]
    times = {id(run): parse_time(run.ended_at) for run in runs}
    if all(t is not None for t in times.values()):
        return TimeAxis(min(times.values()), max(times.values()), True), times
    places = {}
    for one in configurations:
        places.update({id(run): float(number) for number, run in enumerate(one.runs, start=1)})
    return TimeAxis(1.0, float(max(len(one.runs) for one in configurations)), False), places


class Page:
    """The page's parts for a list of configurations; `results_link` is the relative link from the
    page's folder to the folder holding the sweeps."""

    def __init__(
        self, configurations: list[Configuration], method: str, shown: str, results_link: str, hosts: str = ""
    ):
        self.hosts = hosts
        """The hosts section's HTML (`hosts_text.hosts_html`), before the table."""
        self.configurations = configurations
        self.method = method
        self.shown = shown
        self.results_link = results_link.rstrip("/")
        self.axis, self.place = _axis(configurations)

    def link(self, run: HistoryRun) -> str:
        return f"{self.results_link}/{quote(run.sweep)}/"

    def chart(self, one: Configuration, measure: str, unit: str, text) -> str:
        shown = [run for run in one.runs if run.values.get(measure) is not None]
        if not shown:
            why = (
                "No scaling efficiency: it is defined for runs on more than one device (E(N) against the local run)"
                if measure == "efficiency"
                else f"No {measure} stored"
            )
            return f'<div class="empty">{why}</div>'
        points = [
            ChartPoint(
                self.place[id(run)],
                run.values[measure],
                self.link(run),
                f"{_day(run)} sweep {run.sweep} run {run.run_id}\ncommit {run.git_sha or 'unknown'}\n"
                f"{measure} {text(run.values[measure])}{unit}",
            )
            for run in shown
        ]
        segments, marks = [], []
        for number, segment in enumerate(one.segments()):
            mean = _mean(segment, measure)
            if mean is not None:
                segments.append((self.place[id(segment[0])], self.place[id(segment[-1])], mean))
            if number:
                before = _mean(one.segments()[number - 1], measure)
                first = segment[0]
                marks.append(
                    ChangeMark(
                        self.place[id(first)],
                        _change(before, mean) or "change",
                        f"change point: {_day(first)}, sweep {first.sweep}, commit {first.git_sha or 'unknown'}; "
                        f"segment mean {_change(before, mean) or 'not comparable'}",
                    )
                )
        return line_chart(self.axis, points, marks, segments, f"{measure} of {one.name}", text)

    def card(self, one: Configuration) -> str:
        charts = [
            ("throughput", "/s", _throughput_text, "throughput (per second, the workload's unit)"),
            ("efficiency", "", _percent_text, "scaling efficiency E(N)"),
        ]
        body = "".join(
            f"<figure><figcaption>{escape(caption)}</figcaption>{self.chart(one, measure, unit, text)}</figure>"
            for measure, unit, text, caption in charts
        )
        changes = len(one.changes)
        found = f"{changes} change point{'' if changes == 1 else 's'}"
        if len(one.runs) < MIN_POINTS:
            found = f"too few runs for change points (at least {MIN_POINTS})"
        return (
            f'<section class="config" {self.data(one)}><h3>{escape(one.name)} '
            f'<span class="place">{escape(one.machine_class)} / {escape(one.suite)} \u00b7 {len(one.runs)} runs \u00b7 '
            f"{found}</span></h3>"
            f'<div class="charts">{body}</div></section>'
        )

    @staticmethod
    def data(one: Configuration) -> str:
        return f'data-workload="{escape(one.workload)}" data-machine="{escape(one.machine_class)}"'

    def row(self, one: Configuration) -> str:
        segments = one.segments()
        last = segments[-1]
        marks = []
        for number in range(1, len(segments)):
            first = segments[number][0]
            change = _change(_mean(segments[number - 1], "throughput"), _mean(segments[number], "throughput"))
            marks.append(
                f'<a href="{escape(self.link(first))}" title="commit {escape(first.git_sha or "unknown")}">'
                f"{escape(first.sweep)}</a> ({escape(_day(first))}, {change})"
            )
        throughput = _mean(last, "throughput")
        efficiency = _mean(last, "efficiency")
        latest = one.runs[-1]
        cells = [
            escape(one.name),
            f"{escape(one.machine_class)} / {escape(one.suite)}",
            str(len(one.runs)),
            f"{escape(_day(one.runs[0]))} \u2013 {escape(_day(latest))}",
            f'<a href="{escape(self.link(latest))}" title="commit {escape(latest.git_sha or "unknown")}">'
            f"{escape(latest.sweep)}</a>",
            f"{_throughput_text(throughput)}/s" if throughput is not None else "",
            _percent_text(efficiency) if efficiency is not None else "\u2013",
            "; ".join(marks) or ("none" if len(one.runs) >= MIN_POINTS else "too few runs"),
        ]
        return f"<tr {self.data(one)}>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"

    def choices(self, name: str, values: list[str]) -> str:
        options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
        return f'<select id="{name}" data-filter="{name}"><option value="">all</option>{options}</select>'

    def html(self) -> str:
        workloads = sorted({one.workload for one in self.configurations})
        machines = sorted({one.machine_class for one in self.configurations})
        total = len(self.configurations)
        head = (
            "<tr><th>configuration</th><th>machine class / suite</th><th>runs</th><th>from \u2013 to</th>"
            "<th>latest sweep</th><th>throughput since last change</th><th>efficiency since last change</th>"
            "<th>change points (throughput change)</th></tr>"
        )
        return (
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>ddpbench history</title><style>{STYLE}</style></head><body>"
            f"<h1>History of {escape(self.shown)}</h1>"
            f'<p class="lead">{total} configuration{"" if total == 1 else "s"} on {len(machines)} machine '
            f"class{'' if len(machines) == 1 else 'es'}. Throughput and scaling efficiency of every stored run, "
            "oldest left; a dot links to its sweep (results/&lt;sweep&gt;/) and shows its commit on hover. Dashed "
            "lines are change points of the throughput, flat lines each segment's mean: "
            "<code>ddpbench gate --baseline history</code> compares a candidate with the runs since the last "
            f"change point. Change points by {escape(self.method)}.</p>"
            '<p class="note">The store keeps no gate verdicts, so none are shown; the change points are '
            "what the gate's history baseline starts from.</p>"
            f'<form class="filter" onsubmit="return false">Workload {self.choices("workload", workloads)} '
            f'Machine class {self.choices("machine", machines)} <span id="shown">{total} of {total} shown</span>'
            "</form>"
            f'<div id="nothing" class="note" hidden>No configuration matches the filter.</div>'
            + "".join(self.card(one) for one in self.configurations)
            + self.hosts
            + f"<h2>Table</h2><table><thead>{head}</thead><tbody>"
            + "".join(self.row(one) for one in self.configurations)
            + f"</tbody></table><script>{SCRIPT}</script></body></html>"
        )


def history_page(store: Store, out_dir: str) -> str:
    """The page's HTML for a store, its links relative to `out_dir` (where it will be written)."""
    from ddpbench.history.culprits import store_verdict
    from ddpbench.history.hosts_text import hosts_html

    configurations, method = read_configurations(store)
    results = os.path.relpath(os.path.abspath(RESULTS), os.path.abspath(out_dir)).replace(os.sep, "/")
    hosts = hosts_html(store_verdict(store), store.shown)
    return Page(configurations, method, store.shown, results, hosts).html()


def write_history_page(url: str, out_dir: str = DEFAULT_OUT) -> str:
    """Write `out_dir`/index.html for the store at `url`; returns its path. A missing or empty
    store is refused (StoreError), nothing written."""
    from ddpbench.history import open_store
    from ddpbench.records.store import write_atomic

    with open_store(url, create=False) as store:
        text = history_page(store, out_dir)
    path = os.path.join(out_dir, "index.html")
    write_atomic(path, text)
    return path


# Cards off screen are laid out only when scrolled to (content-visibility), so a year of nights for
# many configurations opens quickly.
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;padding:16px 24px;max-width:1320px;color:#1b1f24}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:18px;margin:28px 0 8px}
h3{font-size:15px;margin:0 0 4px}.place{font-weight:normal;color:#57606a;font-size:13px}
.lead{margin:0 0 6px;max-width:1100px}.note{color:#57606a;margin:4px 0 10px}
.filter{position:sticky;top:0;background:#fff;padding:8px 0;border-bottom:1px solid #d0d7de;z-index:1}
.filter select{margin:0 14px 0 4px;font:inherit}#shown{color:#57606a}
.config{border:1px solid #d0d7de;border-radius:6px;padding:10px 12px;margin:12px 0;
content-visibility:auto;contain-intrinsic-size:auto 280px}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:16px}figure{margin:0}
figcaption{font-size:12px;color:#57606a}.chart{width:100%;height:auto;display:block}
.empty{color:#57606a;font-size:13px;padding:18px 24px;text-align:center;border:1px dashed #d0d7de}
.plot{fill:#fafbfc;stroke:#d0d7de}.grid{stroke:#eaeef2}.line{fill:none;stroke:#0969da;stroke-width:1.2}
circle{fill:#0969da;stroke:#fff;stroke-width:.5}a:hover circle{fill:#cf222e;r:4}
.mean{stroke:#8250df;stroke-width:2;opacity:.85;pointer-events:none}.change line{stroke:#cf222e;stroke-dasharray:4 3}
.change text{fill:#cf222e;font-size:11px}text.y{text-anchor:end;font-size:11px;fill:#57606a}
text.x{font-size:11px;fill:#57606a}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{border-bottom:1px solid #d0d7de;padding:4px 6px;
text-align:left;vertical-align:top}th{background:#f6f8fa}td:nth-child(4){white-space:nowrap}
@media (max-width:900px){.charts{grid-template-columns:1fr}}
"""

# Shows what matches every filter (sections and table rows), and how many configurations that is.
SCRIPT = """
(function(){
  var selects=document.querySelectorAll('select[data-filter]');
  function apply(){
    var want={};
    selects.forEach(function(s){want[s.dataset.filter]=s.value;});
    var shown=0,total=0;
    document.querySelectorAll('[data-workload]').forEach(function(el){
      var ok=(!want.workload||el.dataset.workload===want.workload)&&(!want.machine||el.dataset.machine===want.machine);
      el.hidden=!ok;
      if(el.tagName==='SECTION'){total++;if(ok)shown++;}
    });
    document.getElementById('shown').textContent=shown+' of '+total+' shown';
    document.getElementById('nothing').hidden=shown>0;
  }
  selects.forEach(function(s){s.addEventListener('change',apply);});
  apply();
})();
"""
