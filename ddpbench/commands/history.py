"""`ddpbench history`: nightly results over time in a history store (SQLite or PostgreSQL,
`ddpbench.history`), CSV series folders in and out of it; and which store a command uses. No torch.

A command uses the store named by --store, else (unless its command line names a CSV history
folder, the deprecated path) the one in $DDPBENCH_HISTORY, else results/history.sqlite where that
file exists. Where none is, it works on CSV folders as before; `history add` then starts
results/history.sqlite, unless a CSV history is already at results/history (it goes on there,
with a note to import it)."""

from __future__ import annotations

import argparse
import os
import sys

from ddpbench.commands.arguments import exit_codes, on_sweep_folder, subcommands
from ddpbench.config.errors import SpecError
from ddpbench.config.options import positive_int

STORE_HELP = (
    "history store: sqlite:///PATH, a file path, or postgresql://USER@HOST/DB (a password from PGPASSWORD "
    "or ~/.pgpass); default $DDPBENCH_HISTORY, else results/history.sqlite"
)


def add_store_argument(parser: argparse.ArgumentParser, help_text: str = STORE_HELP) -> None:
    parser.add_argument("--store", default=None, metavar="URL", help=help_text)


def add_history_parser(commands) -> None:
    """The `history` command group, under the top-level subcommands `commands`."""
    history = commands.add_parser(
        "history",
        help="what the gate compares with: a baseline, nightly sweeps over time",
        description="What the gate compares a sweep with: the saved baseline of each machine class and suite "
        "(gate --baseline auto), and the history store of nightly sweeps (gate --baseline history, and the noise "
        "of every comparison).",
    )
    exit_codes(history, "those of each subcommand (ddpbench history SUBCOMMAND --help)")
    history_commands = subcommands(history, "history_command")
    baseline = history_commands.add_parser(
        "baseline",
        help="save a sweep as the baseline of its machine class and suite (results/baselines/<class>/<suite>/), "
        "what gate --baseline auto compares with",
    )
    add_baseline_save_arguments(baseline)
    exit_codes(baseline, "0 saved")
    baseline.set_defaults(handler=command_baseline_save)
    add = history_commands.add_parser(
        "add",
        help="add a sweep's ok runs to the history store (default results/history.sqlite), what gate --baseline "
        "history reads",
    )
    add.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a sweep's folder (results/<sweep-id>)")
    # default None: a --history given on the command line means the CSV folder, even the default one.
    add.add_argument(
        "--history",
        default=None,
        help="deprecated: a CSV history folder to append to; use --store (history export writes CSV files)",
    )
    add_store_argument(
        add,
        STORE_HELP + " (where that file exists, or no CSV history is at results/history); one transaction, and "
        "runs already stored are skipped",
    )
    exit_codes(add, "0 added (runs already stored are skipped)")
    add.set_defaults(handler=command_history_add)
    changes = history_commands.add_parser("changes", help="change points of history series (Apache Otava)")
    changes.add_argument(
        "paths", nargs="*", metavar="PATH", help="deprecated: history folders or series files (*.csv); use --store"
    )
    add_store_argument(changes)
    exit_codes(changes, "0 every series read (with or without change points)")
    changes.set_defaults(handler=command_history_changes)
    into = history_commands.add_parser("import", help="add CSV history series (a history folder) to the store")
    into.add_argument("folder", metavar="DIR", help="a history root (results/history) or one <class>/<suite> folder")
    add_store_argument(into)
    exit_codes(into, "0 imported (runs already stored are skipped)")
    into.set_defaults(handler=command_history_import)
    out = history_commands.add_parser(
        "export", help="write the history store as CSV files, one per series (not a sweep: see report)"
    )
    out.add_argument("folder", metavar="DIR", help="written as DIR/<class>/<suite>/<series>.csv")
    add_store_argument(out)
    exit_codes(out, "0 written")
    out.set_defaults(handler=command_history_export)
    page = history_commands.add_parser(
        "report",
        help="the history store's HTML page: a chart per configuration over time, then a table (a sweep's own "
        "report: ddpbench report)",
    )
    add_store_argument(page)
    page.add_argument(
        "--out",
        default=os.path.join("reports", "history"),
        metavar="DIR",
        help="folder for the page, DIR/index.html (default reports/history)",
    )
    exit_codes(page, "0 written")
    page.set_defaults(handler=command_history_report)
    hosts = history_commands.add_parser(
        "hosts",
        help="the hosts and GPUs that were the slowest again and again, beyond chance, and how to keep them out of "
        "the next jobs",
        description="The hosts and devices (GPUs) that held the slowest rank in more of the stored sweeps than "
        "chance gives for the jobs' layouts (one vote per sweep; an exact binomial test corrected over the hosts "
        "tested), with the wait for each and its phase, and the ranks that were; then what to do: --exclude for "
        "SLURM, a node anti-affinity for TrainJobs (--avoid-hosts of ddpbench sbatch and ddpbench trainjob).",
    )
    add_store_argument(hosts)
    window = hosts.add_mutually_exclusive_group()
    window.add_argument(
        "--last",
        type=positive_int,
        default=None,
        metavar="K",
        help="the window: the last K sweeps with runs of several ranks (default 30)",
    )
    window.add_argument("--since", default=None, metavar="DATE", help="the window: the sweeps since DATE (2026-12-01)")
    hosts.add_argument(
        "--family-alpha",
        default="1%",
        help="how often a window with no slow host names one, at most (default 1%%; each of hosts, devices, ranks)",
    )
    hosts.add_argument("--json-file", default=None, metavar="FILE", help="also write the answer as JSON to FILE")
    exit_codes(hosts, "0 read (with or without hosts named)")
    hosts.set_defaults(handler=command_history_hosts)


def add_baseline_save_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a sweep's folder (results/<sweep-id>)")
    parser.add_argument(
        "--baselines",
        default="results/baselines",
        metavar="DIR",
        help="where baselines live: DIR/<machine class>/<suite>/ (default results/baselines)",
    )


def command_baseline_save(args: argparse.Namespace) -> int:
    from ddpbench.gate.baselines import save_baseline

    saved = on_sweep_folder(args.sweep_dir, lambda: save_baseline(args.sweep_dir, args.baselines))
    print(f"baseline saved: {saved}")
    return 0


def warn_deprecated(args: argparse.Namespace, option: str, instead: str) -> None:
    """A line on stderr after the command's output (cli.main); the option still works as it did."""
    line = f"{option} is deprecated and will be removed: {instead}"
    if hasattr(args, "deprecations"):
        args.deprecations.append(line)
    else:  # called without cli.main
        print(f"warning: {line}", file=sys.stderr)


def _not_both(store: str | None, csv_named: bool, what: str) -> None:
    if store is not None and csv_named:
        raise SpecError(f"give --store or {what}, not both")


def add_target(args: argparse.Namespace) -> str | None:
    """The store `history add` writes to; None: the CSV folder under --history."""
    from ddpbench.gate.history import DEFAULT_HISTORY
    from ddpbench.history import DEFAULT_STORE, chosen_address

    _not_both(args.store, args.history is not None, "--history")
    if args.history is not None:
        warn_deprecated(
            args,
            "history add --history",
            "add to the store (--store URL, default results/history.sqlite); `history import DIR` moves a CSV "
            "history there and `history export DIR` writes one",
        )
    url = chosen_address(args.store, args.history is not None)
    if url is None and (args.history is not None or os.path.isdir(DEFAULT_HISTORY)):
        if args.history is None:
            print(
                f"note: appending to the CSV history in {DEFAULT_HISTORY}; move it into the store once with: "
                f"ddpbench history import {DEFAULT_HISTORY}",
                file=sys.stderr,
            )
        return None
    return url or DEFAULT_STORE


def gate_store(args: argparse.Namespace) -> str | None:
    """The store the gate reads; None: CSV folders (--history-folder, or under --history)."""
    from ddpbench.history import chosen_address

    csv_named = args.history_folder is not None or args.history is not None
    _not_both(args.store, csv_named, "--history/--history-folder")
    for option, given in (("gate --history", args.history), ("gate --history-folder", args.history_folder)):
        if given is not None:
            warn_deprecated(
                args,
                option,
                "the gate reads the history store (--store URL); `ddpbench history import DIR` moves a CSV "
                "history there",
            )
    return chosen_address(args.store, csv_named)


def gate_series(url: str, ok_records: list, candidate: str, required: bool) -> tuple[str, dict]:
    """The store's series for the candidate's machine class and suite (named as the gate shows
    them), as `read_history` gives a folder's; empty where it has none, unless `required`."""
    from ddpbench.gate.baselines import machine_class, suite_of
    from ddpbench.gate.compare import GateError
    from ddpbench.gate.history import read_store_history
    from ddpbench.history import NoHistoryYet, open_store, parse_address

    shown = parse_address(url).shown
    if not os.path.isdir(candidate) or not ok_records:
        if required:
            raise GateError(
                f"--baseline history with the store {shown} needs a sweep folder with ok runs as --candidate "
                "(its machine class and suite name the series)"
            )
        return shown, {}
    machine, suite = machine_class(ok_records[0]), suite_of(candidate)
    label = f"{shown} ({machine}/{suite})"
    try:
        with open_store(url, create=False) as store:
            return label, read_store_history(store, machine, suite)
    except NoHistoryYet:
        if required:
            raise
        return label, {}


def command_history_add(args: argparse.Namespace) -> int:
    from ddpbench.gate.history import HistoryError, add_sweep
    from ddpbench.history import StoreError, open_store
    from ddpbench.history.sweeps import sweep_runs

    url = add_target(args)
    try:
        if url is None:
            folder, notes = add_sweep(args.sweep_dir, args.history or "results/history")
        else:
            machine, suite, runs, notes = sweep_runs(args.sweep_dir)
            with open_store(url) as store:
                added = store.add_sweep(runs)
            folder = (
                f"{store.shown} ({machine}/{suite}): {added.runs} new run(s), "
                f"{added.given - added.runs} already there"
            )
    except (HistoryError, StoreError) as exc:
        raise SpecError(str(exc)) from None
    for note in notes:
        print(f"note: {note}")
    print(f"history updated: {folder}")
    return 0


def _store_series(url: str) -> dict:
    """Every series of a store by name; names carry the machine class and suite where it has several."""
    from ddpbench.gate.history import read_store_history
    from ddpbench.history import open_store

    found = {}
    with open_store(url, create=False) as store:
        places = store.places()
        for machine, suite in places:
            for series in read_store_history(store, machine, suite).values():
                if len(places) > 1:
                    series.configuration = f"{machine}/{suite} {series.configuration}"
                found[series.path] = series
        if not found:
            raise SpecError(f"history store {store.shown}: holds no runs; add sweeps with: ddpbench history add")
    return found


def command_history_changes(args: argparse.Namespace) -> int:
    from ddpbench.gate.changepoints import MIN_POINTS, change_points
    from ddpbench.gate.history import HistoryError, read_history, read_series
    from ddpbench.history import StoreError, chosen_address

    _not_both(args.store, bool(args.paths), "PATH")
    if args.paths:
        warn_deprecated(
            args,
            "history changes PATH (CSV folders and files)",
            "read the store with --store URL; `ddpbench history import DIR` moves a CSV history there",
        )
    try:
        found = {}
        for path in args.paths:
            found.update(
                {s.path: s for s in read_history(path).values()} if os.path.isdir(path) else {path: read_series(path)}
            )
        if not args.paths:
            url = chosen_address(args.store)
            if url is None:
                raise SpecError(
                    "the following arguments are required: PATH (history folders or series files), or a "
                    "history store with --store URL"
                )
            found = _store_series(url)
    except (HistoryError, StoreError) as exc:
        raise SpecError(str(exc)) from None
    short = [f"{path} ({len(s.rows)} points)" for path, s in found.items() if len(s.rows) < MIN_POINTS]
    if short:
        raise SpecError(f"too short for change points (at least {MIN_POINTS} points): {', '.join(short)}")
    points, method = change_points({path: s.values("throughput") for path, s in found.items()})
    print(f"change points by {method}")
    for path, series in found.items():
        marks = (
            ", ".join(
                f"run {i + 1} ({series.rows[i]['sweep']}, {series.rows[i]['ended_at'][:10]})" for i in points[path]
            )
            or "none"
        )
        print(f"{series.configuration}: {len(series.rows)} runs; change points: {marks}")
    return 0


def command_history_import(args: argparse.Namespace) -> int:
    from ddpbench.gate.history import HistoryError
    from ddpbench.history import DEFAULT_STORE, StoreError, chosen_address, open_store
    from ddpbench.history.csv_files import import_folder

    try:
        with open_store(chosen_address(args.store) or DEFAULT_STORE) as store:
            added, files = import_folder(store, args.folder)
    except (HistoryError, StoreError) as exc:
        raise SpecError(str(exc)) from None
    print(
        f"history imported: {args.folder} ({files} series) -> {store.shown}: {added.runs} new run(s), "
        f"{added.given - added.runs} already there"
    )
    return 0


def command_history_export(args: argparse.Namespace) -> int:
    from ddpbench.history import DEFAULT_STORE, StoreError, chosen_address, open_store
    from ddpbench.history.csv_files import export_folder

    try:
        with open_store(chosen_address(args.store) or DEFAULT_STORE, create=False) as store:
            written = export_folder(store, args.folder)
    except StoreError as exc:
        raise SpecError(str(exc)) from None
    except OSError as exc:
        raise SpecError(f"{args.folder}: cannot write: {exc.strerror or exc}") from None
    print(f"history exported: {store.shown} -> {args.folder} ({len(written)} series)")
    return 0


def command_history_report(args: argparse.Namespace) -> int:
    from ddpbench.history import DEFAULT_STORE, StoreError, chosen_address
    from ddpbench.history.report import write_history_page

    try:
        path = write_history_page(chosen_address(args.store) or DEFAULT_STORE, args.out)
    except StoreError as exc:
        raise SpecError(str(exc)) from None
    except OSError as exc:
        raise SpecError(f"{args.out}: cannot write the history page: {exc.strerror or exc}") from None
    print(f"history page: {path}")
    return 0


def since_date(text: str | None) -> str | None:
    """--since as an ISO date, or SpecError."""
    import datetime

    if text is None:
        return None
    try:
        return datetime.date.fromisoformat(text.strip()).isoformat()
    except ValueError:
        raise SpecError(f"--since takes a date such as 2026-12-01 (YYYY-MM-DD); got {text!r}") from None


def command_history_hosts(args: argparse.Namespace) -> int:
    import json

    from ddpbench.gate.stats import parse_fraction
    from ddpbench.history import DEFAULT_STORE, StoreError, chosen_address, open_store
    from ddpbench.history.culprits import DEFAULT_LAST, Window, store_verdict
    from ddpbench.history.hosts_text import hosts_json, hosts_lines
    from ddpbench.records.store import write_atomic

    try:
        alpha = parse_fraction(args.family_alpha, "--family-alpha")
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    window = Window(args.last or DEFAULT_LAST, since_date(args.since))
    try:
        with open_store(chosen_address(args.store) or DEFAULT_STORE, create=False) as store:
            verdict, shown = store_verdict(store, window, alpha), store.shown
    except StoreError as exc:
        raise SpecError(str(exc)) from None
    for line in hosts_lines(verdict, shown):
        print(line)
    if args.json_file:
        try:
            write_atomic(args.json_file, json.dumps(hosts_json(verdict, shown), indent=1) + "\n")
        except OSError as exc:
            raise SpecError(f"{args.json_file}: cannot write: {exc.strerror or exc}") from None
    return 0
