"""`ddpbench explain SWEEP_DIR`: where each configuration's scaling went, cause by cause, pooled over
its runs. No torch."""

from __future__ import annotations

import argparse
import json
import os

from ddpbench.commands.arguments import add_deprecated_option, exit_codes
from ddpbench.config.errors import SpecError


def add_explain_parser(commands) -> None:
    explain = commands.add_parser(
        "explain",
        help="print where each configuration's efficiency went, and what to try",
        description="Print where each configuration's efficiency went: the causes of lost scaling from the "
        "in-process ablation, pooled over its runs with their 95 % intervals, and what to try. table prints the "
        "scaling itself; report writes it all as one file.",
    )
    explain.add_argument("sweep_dir", metavar="SWEEP_DIR", help="a sweep's folder (results/<sweep-id>)")
    exit_codes(explain, "0 explained (runs that could not be are listed as such)")
    explain.add_argument(
        "--json-file",
        dest="json_out",
        metavar="FILE",
        default=None,
        help="also write the answers as JSON: one object per configuration, pooled over its runs",
    )
    # The old spelling keeps its old meaning: a list with one object per run, its causes under their
    # names of before 0.2.
    add_deprecated_option(
        explain,
        "--json",
        dest="json_path",
        instead="--json-file FILE (one object per configuration; --json still writes the per-run JSON of before 0.2)",
    )
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
        help="also print each configuration's causes with how each was measured, its check and all its advice",
    )
    explain.set_defaults(handler=command_explain, json_path=None)


def sweep_answers(sweep_dir: str, with_traces: bool = True):
    """(answers, lines for runs that could not be answered, matched traces, traces not read);
    ExplainError where nothing can be."""
    from ddpbench.analysis.answers import answer_sweep
    from ddpbench.analysis.critical_path_text import read_jobs
    from ddpbench.records.store import read_records

    records, unreadable = read_records(sweep_dir)
    if not records and unreadable:
        path, reason = unreadable[0]
        raise SpecError(f"{sweep_dir!r} holds no readable run record ({len(unreadable)} unreadable; {path}: {reason})")
    if not records:
        raise SpecError(f"{sweep_dir!r} holds no run records (SWEEP_DIR/runs/*.json): run `ddpbench sweep` first")
    jobs, not_read = read_jobs(records) if with_traces else ({}, {})
    answers, problems = answer_sweep(records, jobs)
    return answers, problems, jobs, not_read


def command_explain(args: argparse.Namespace) -> int:
    from ddpbench.analysis.answer_text import check_line, detail, sentence, table, top_advice
    from ddpbench.analysis.causes import ExplainError
    from ddpbench.analysis.critical_path_text import path_lines
    from ddpbench.analysis.network import ProfileError, load_profile

    if not os.path.isdir(args.sweep_dir):
        raise SpecError(f"{args.sweep_dir!r} is not a sweep folder")
    try:
        profile = load_profile(args.profile) if args.profile else None
        answers, problems, jobs, not_read = sweep_answers(args.sweep_dir)
    except (ExplainError, ProfileError) as exc:
        raise SpecError(str(exc)) from None
    if not answers:
        raise SpecError("no run could be explained: " + "; ".join(problems))
    print(table(answers))
    print()
    for answer in answers:
        print(sentence(answer))
        check = check_line(answer)
        if check:
            print(f"  check: {check}")
        if answer.left_out:
            print(f"  left out of the pooled figures: {', '.join(answer.left_out)} (the speed check flagged them)")
    print()
    for answer in answers:
        print(f"try  {answer.name}: {top_advice(answer, profile)}")
    paths: dict = {}
    lines = path_lines(answers, jobs, not_read, paths)
    if lines:
        print()
        print("\n".join(lines))
    if args.detail:
        print()
        print("\n\n".join(detail(answer, profile) for answer in answers))
    for line in problems:
        print(f"not explained: {line}")
    if args.json_out or args.json_path:
        from ddpbench.analysis.explain_json import answers_json, legacy_runs_json

        for path, found in ((args.json_out, answers_json), (args.json_path, legacy_runs_json)):
            if path:
                with open(path, "w", encoding="utf-8") as handle:
                    json.dump(found(answers, paths), handle, indent=1)
                print(f"json: {path}")
    return 0


def closing_lines(sweep_dir: str) -> list[str]:
    """The sweep's answer in sentences: one per workload at its largest world size of DDP (its
    efficiency with its spread over the runs, its largest cause, a rank that held the others back),
    the check where the two efficiencies differ beyond noise, and on CPU what that can tell."""
    from ddpbench.analysis.answer_text import check_line, closing_sentence
    from ddpbench.analysis.causes import ExplainError
    from ddpbench.report.verdict import CPU_NOTE, headline_answers

    try:
        answers, _, _, _ = sweep_answers(sweep_dir)
    except (ExplainError, SpecError):
        return []
    lines = []
    for answer in headline_answers(answers).values():
        lines.append(closing_sentence(answer))
        check = check_line(answer)
        if check:
            lines.append(f"  check: {check}")
    if answers and answers[0].record.spec.device == "cpu":
        lines.append(CPU_NOTE.format(ranks=max(answer.world_size for answer in answers)))
    return lines
