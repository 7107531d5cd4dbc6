"""`ddpbench explain SWEEP_DIR`: where each DDP run's scaling went, term by term. No torch."""

from __future__ import annotations

import argparse
import json
import os

from ddpbench.commands.arguments import add_deprecated_option, exit_codes
from ddpbench.config.errors import SpecError


def add_explain_parser(commands) -> None:
    explain = commands.add_parser(
        "explain",
        help="print where each DDP run's lost scaling went, with advice",
        description="Print where each DDP run's efficiency went: the lost time per step split into measured "
        "terms, with advice. table prints the scaling itself; report writes it all as one file.",
    )
    explain.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a sweep's folder (results/<sweep-id>)")
    exit_codes(explain, "0 explained (runs that could not be are listed as such)")
    explain.add_argument(
        "--json-file",
        dest="json_path",
        metavar="FILE",
        default=None,
        help="also write the breakdowns as JSON, a list with one object per DDP run",
    )
    add_deprecated_option(explain, "--json", dest="json_path", instead="--json-file FILE")
    add_deprecated_option(explain, "--profile", dest="profile", instead="--network FILE|PRESET")
    explain.add_argument(
        "--network",
        dest="profile",
        default=None,
        metavar="FILE|PRESET",
        help="network profile (ddpbench comm's profile.json or a preset): the advice on exposed "
        "communication then projects the gain of each knob (marked as a projection)",
    )
    explain.add_argument(
        "--detail",
        action="store_true",
        help="also print each run's terms with how each was measured, its step by phase, the three "
        "exposed-communication estimates and all its advice",
    )
    explain.set_defaults(handler=command_explain)


def sweep_breakdowns(sweep_dir: str, profile: dict | None = None):
    """(breakdowns, lines for runs that could not be explained); ExplainError where nothing can be."""
    from ddpbench.analysis.breakdown import explain_sweep
    from ddpbench.records.store import read_records

    records, unreadable = read_records(sweep_dir)
    if not records and unreadable:
        path, reason = unreadable[0]
        raise SpecError(f"{sweep_dir!r} holds no readable run record ({len(unreadable)} unreadable; {path}: {reason})")
    if not records:
        raise SpecError(f"{sweep_dir!r} holds no run records (SWEEP_DIR/runs/*.json): run `ddpbench sweep` first")
    return explain_sweep(records, profile)


def command_explain(args: argparse.Namespace) -> int:
    from ddpbench.analysis.breakdown_terms import ExplainError
    from ddpbench.analysis.breakdown_text import (
        closing_line,
        disagreement,
        format_breakdown,
        format_sweep_table,
        run_name,
        top_advice,
    )

    if not os.path.isdir(args.sweep_dir):
        raise SpecError(f"{args.sweep_dir!r} is not a sweep folder")
    from ddpbench.analysis.network import ProfileError, load_profile

    try:
        profile = load_profile(args.profile) if args.profile else None
        breakdowns, problems = sweep_breakdowns(args.sweep_dir, profile)
    except (ExplainError, ProfileError) as exc:
        raise SpecError(str(exc)) from None
    if not breakdowns:
        raise SpecError("no run could be explained: " + "; ".join(problems))
    print(format_sweep_table(breakdowns))
    print()
    for breakdown in breakdowns:
        print(f"run  {closing_line(breakdown)}")
        for said in filter(None, [disagreement(breakdown), *breakdown.notes]):
            print(f"     {said}")
    advised = [breakdown for breakdown in breakdowns if breakdown.advice]
    if advised:
        print()
    for breakdown in advised:
        print(f"advice  {run_name(breakdown)}: {top_advice(breakdown)}")
    # Beside the ladder's terms: who held each step on the critical path across ranks, from the
    # runs' traces (analysis/critical_path_text.py).
    from ddpbench.analysis.critical_path_text import sweep_lines

    paths: dict = {}
    path_lines = sweep_lines(args.sweep_dir, breakdowns, paths)
    if path_lines:
        print()
        print("\n".join(path_lines))
    if args.detail:
        print()
        print("\n\n".join(format_breakdown(breakdown) for breakdown in breakdowns))
    for line in problems:
        print(f"not explained: {line}")
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as handle:
            # critical_path: null where the run has no traces of two ranks or more.
            json.dump(
                [dict(breakdown.as_dict(), critical_path=paths.get(breakdown.run_id)) for breakdown in breakdowns],
                handle,
                indent=1,
            )
        print(f"json: {args.json_path}")
    return 0


def closing_lines(sweep_dir: str) -> list[str]:
    """The sweep's last words: one line per run that has a finding (a term beyond its noise);
    runs without one say nothing here."""
    from ddpbench.analysis.breakdown_terms import ExplainError
    from ddpbench.analysis.breakdown_text import finding, verdict

    try:
        breakdowns, _ = sweep_breakdowns(sweep_dir)
    except (ExplainError, SpecError):
        return []
    lines = [f"finding  {said}" for said in map(finding, breakdowns) if said is not None]
    if breakdowns:
        # Runs without a finding: with a ladder their terms are within noise; without one (fsdp2,
        # compiled, scripts, --no-profile) their terms were not measured in place.
        quiet = sum(1 for b in breakdowns if b.ladder and finding(b) is None and verdict(b).startswith("no loss"))
        spread = sum(1 for b in breakdowns if b.ladder and finding(b) is None) - quiet
        unmeasured = sum(1 for b in breakdowns if not b.ladder)
        rest = "".join(
            (
                f"; {quiet} run(s) lost nothing beyond their noise" if quiet else "",
                f"; {spread} run(s) lost scaling that no single term holds beyond its noise" if spread else "",
                f"; {unmeasured} run(s) without a ladder, whose terms were not measured in place" if unmeasured else "",
            )
        )
        none = "no DDP run lost scaling beyond its noise; " if not lines and not unmeasured and not spread else ""
        lines.append(f"({none}ddpbench explain {sweep_dir} breaks every loss down{rest})")
    return lines
