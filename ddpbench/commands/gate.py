"""`ddpbench gate`, `ab` and `baseline`: the regression gate's commands (`history`: commands/history.py). No torch."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ddpbench.commands.arguments import (
    BAD_INPUT,
    COULD_NOT_RUN_LINE,
    INTERRUPTED,
    OneLineErrorParser,
    add_deprecated_option,
    add_run_arguments,
    comma_list,
    deprecated_command,
    exit_codes,
    spec_from_args,
    subcommands,
    unattended,
)

# The history commands live in ddpbench.commands.history; importable from here as they were.
from ddpbench.commands.history import (  # noqa: F401
    add_baseline_save_arguments,
    add_store_argument,
    command_baseline_save,
    command_history_add,
    command_history_changes,
)
from ddpbench.config.errors import SpecError

# 4: a regression that the machine's canary accounts for (ddpbench.gate.drift): still a failure,
# told apart from a confirmed one (1) so that CI can rerun it as a same-job A/B.
EXIT_FAIL, EXIT_UNDERPOWERED, EXIT_DRIFT = 1, 3, 4


def add_gate_parser(commands) -> None:
    gate = commands.add_parser(
        "gate",
        help="a sweep against a baseline or the history; exit 1 on a regression",
        description="Compare a candidate sweep (or record) with a baseline, the stored baseline of its machine "
        "class, or the history; exit 1 on a regression. --confirm-with reruns what it flags as a same-job A/B "
        "(what ab does for a configuration you name).",
    )
    gate.add_argument(
        "--baseline",
        required=True,
        help="sweep folder, record file, 'auto' (the stored baseline for the candidate's machine class "
        "and suite) or 'history' (the stored history since its last change point)",
    )
    gate.add_argument("--candidate", required=True, help="sweep folder or record file")
    gate.add_argument(
        "--metrics",
        type=comma_list,
        default=None,
        help="comma-separated subset of throughput,efficiency,exposed_share (default: all)",
    )
    gate.add_argument(
        "--allow-env-mismatch", action="store_true", help="compare even when GPU, CPU, torch, CUDA or NCCL differ"
    )
    gate.add_argument(
        "--allow-missing",
        action="store_true",
        help="a configuration of the baseline missing from the candidate is a note, not a failure",
    )
    # None: results/history, read where it exists and no store is; named, the deprecated CSV path.
    gate.add_argument(
        "--history",
        default=None,
        help="deprecated: root of a CSV history (default results/history); use --store",
    )
    gate.add_argument(
        "--history-folder",
        default=None,
        help="deprecated: one machine class and suite's CSV history folder; use --store",
    )
    confirm = gate.add_argument_group("confirmation (a same-job A/B of what the comparison flags)")
    confirm.add_argument(
        "--confirm-with",
        default=None,
        metavar="BASE",
        help="on a regression, rerun the flagged configurations here against BASE (a ddpbench working tree, "
        "run by its own .venv when it has one, e.g. .gate-base/<sha>, a Python executable, or a git ref of the "
        "repository holding the candidate's workload file, run from its own worktree against your checkout), "
        "base and candidate interleaved; the verdict is the confirmation's",
    )
    confirm.add_argument(
        "--confirm-rounds", type=int, default=5, help="rounds of base then candidate per configuration (default 5)"
    )
    confirm.add_argument(
        "--confirm-out", default=None, help="the confirmation's records (default results/confirm-<time>)"
    )
    add_verdict_arguments(gate)
    add_store_argument(gate)
    exit_codes(
        gate,
        "0 pass",
        "1 a regression (confirmed, with --confirm-with) or something not comparable (a failed run, a missing "
        "configuration, other machines)",
        f"{EXIT_UNDERPOWERED} inconclusive: a comparison looks slower than the threshold but not significantly "
        "(it says how many runs a side would decide); with --fail-underpowered also a comparison too weak to see "
        "its target",
        f"{EXIT_DRIFT} a regression the machine accounts for (its canary drifted, it was busy), a run the speed "
        "check flags, or a candidate machine so much faster that with its speed-up taken out the code is slower than "
        "the threshold: "
        "rerun, or confirm with --confirm-with",
        BAD_INPUT,
        INTERRUPTED,
    )
    gate.set_defaults(handler=command_gate)


def add_ab_parser(commands) -> None:
    ab = commands.add_parser(
        "ab",
        help="one configuration in two code trees, A B A B ..., B gated against A",
        usage="ddpbench ab A B [options] -- RUN_OPTIONS (those of ddpbench run, e.g. --workload mlp --nproc 2)",
        description="Run one configuration in two environments (code trees or Pythons), A B A B ..., and gate B "
        "against A with a paired test: what gate --confirm-with does for the configurations a comparison flags, "
        "for one you name. make gate BASE=<ref> runs it against a git ref's code. A and B may be two git refs of "
        "your own repository (the one holding the workload file or --script): each runs from its own worktree with "
        "this ddpbench and this Python.",
    )
    ab.add_argument(
        "a",
        help="environment A: a Python executable (runs this ddpbench), a ddpbench working tree, or a git ref of "
        "the repository holding the workload file or --script (each ref then runs from its own worktree)",
    )
    ab.add_argument("b", help="environment B, the candidate (a git ref where A is one)")
    ab.add_argument("--rounds", type=int, default=5, help="rounds of A then B (default 5, at least 2)")
    ab.add_argument("--python", default=None, help="Python for working trees (default: this one)")
    ab.add_argument("--out", default=None, help="records go to OUT/a and OUT/b (default results/ab-<time>)")
    add_verdict_arguments(ab)
    exit_codes(
        ab,
        "0 pass: B no slower than A",
        "1 B regressed against A, or a round failed",
        f"{EXIT_UNDERPOWERED} inconclusive: B looks slower than the threshold but not significantly (it says how "
        "many rounds would decide); with --fail-underpowered also too few or too noisy rounds to see the target",
        BAD_INPUT,
        COULD_NOT_RUN_LINE,
        INTERRUPTED,
    )
    # The log of an error it did not expect goes with the rounds' records, once their folder is known.
    ab.set_defaults(handler=unattended(command_ab, "ab", lambda args: args.out))


def add_baseline_parser(commands) -> None:
    """`baseline save`, the old name of `history baseline`: not listed, and it says so when used."""
    baseline = commands.add_parser(
        "baseline", description="Deprecated: ddpbench history baseline SWEEP_DIR saves a sweep as the baseline."
    )
    exit_codes(baseline, "those of its subcommand")
    baseline_commands = subcommands(baseline, "baseline_command")
    save = baseline_commands.add_parser(
        "save",
        help="deprecated: ddpbench history baseline SWEEP_DIR",
        description="Deprecated: use ddpbench history baseline SWEEP_DIR, which does the same.",
    )
    add_baseline_save_arguments(save)
    exit_codes(save, "0 saved")
    save.set_defaults(
        handler=deprecated_command(command_baseline_save, "baseline save", "ddpbench history baseline SWEEP_DIR")
    )


def gate_settings(args: argparse.Namespace):
    from ddpbench.gate.stats import GateSettings, parse_fraction, parse_threshold

    return GateSettings(
        max_regression=parse_threshold(args.max_regression),
        family_alpha=parse_fraction(args.family_alpha, "--family-alpha"),
        prior_noise=None if args.prior_noise is None else parse_fraction(args.prior_noise, "--prior-noise"),
    )


def gate_exit(
    comparisons,
    settings,
    notes,
    env_notes,
    args,
    header: str,
    extra: dict | None = None,
    canary=None,
    confirm=None,
    busy: dict | None = None,
    flagged: dict | None = None,
    why: list | None = None,
) -> int:
    """Print, write --summary-md and --json, and return the exit code: 0 pass, 1 regression or not
    comparable, 3 a comparison that looks slower than the threshold but not significantly
    (inconclusive), or (only with --fail-underpowered) one too weak to see its target, 4 a
    regression that the machine's canary (a `drift.CanaryView`, printed when given) accounts for, a
    pass or inconclusive verdict whose candidate machine ran faster by enough that, with the speed-up
    taken out of its throughput, a comparison no longer passes (`drift.faster_machine`), or
    one whose every configuration had a run on a busy machine (`busy`, from `busy.busy_runs`), and
    any verdict on a configuration with a run the probe flags (`flagged`, `busy.probe_flagged`).
    `why` (`gate.why.Why`, one per configuration) says why each configuration that regressed did,
    with a command that reproduces it. `confirm`, given a regression, reruns what was flagged and
    returns a `confirm.Confirmation`, whose verdict is then the gate's (0 or 1; never 4: the rerun
    has answered the drift question)."""
    from ddpbench.gate.busy import busy_regressions, busy_words, flagged_comparisons, flagged_words
    from ddpbench.gate.compare import overall_verdict, underpowered
    from ddpbench.gate.drift import canary_json, canary_table, drift_words, faster_machine, faster_words, judge_drift
    from ddpbench.gate.output import as_json, format_table, inconclusive_lines, markdown_summary, percent, sight_lines
    from ddpbench.records.store import write_atomic

    if not any(c.verdict != "n/a" for c in comparisons):
        # A verdict on nothing would read as PASS: say what was missing instead (bad input, exit 2).
        missing = "; ".join(f"{c.measure} of {c.configuration}" for c in comparisons)
        asked = getattr(args, "metrics", None) or ("efficiency",)
        raise SpecError(
            "nothing was compared: "
            + (f"{missing} not measured on both sides" if missing else "no measure asked for is on both sides")
            + ("; efficiency needs each sweep's local run (add local to --strategies)" if "efficiency" in asked else "")
            + "".join(f"; {note}" for note in notes)
        )
    print(format_table(comparisons, settings))
    for line in sight_lines(comparisons, settings):
        print(f"sight: {line}")
    for line in inconclusive_lines(comparisons, settings):
        print(f"inconclusive: {line}")
    for note in notes:
        print(f"note: {note}")
    if why is not None:
        from ddpbench.gate.why_text import why_json, why_lines

        for line in why_lines(why):
            print(line)
        extra = {**(extra or {}), "why": why_json(why)}
    result = overall_verdict(comparisons)
    blind = underpowered(comparisons)
    drift = canary is not None and judge_drift(canary, comparisons).drift
    if canary is not None:
        print(canary_table(canary))
        extra = {**(extra or {}), "canary": canary_json(canary)}
    if drift:
        # With --confirm-with given, the confirmation below is the answer: no advice to run one.
        notes = notes + [drift_words(canary, getattr(args, "confirm_with", False) is None)]
    # A candidate machine that got faster could hide a slowdown: its speed-up is taken out of every
    # throughput ratio, and a comparison that passed but does not once corrected stops the pass (a
    # regression stays one: the code is slower still).
    faster = faster_machine(canary, comparisons, settings) if canary is not None else None
    if faster and result in ("pass", "inconclusive") and faster.corrected:
        words = faster_words(faster, settings.max_regression, getattr(args, "confirm_with", False) is None)
        notes = notes + [words]
        if not faster.no_pass:  # the notes above are printed; a no-pass note ends the verdict line instead
            print(f"note: {words}")
        found = {
            "probe": faster.fastest.probe,
            "speedup": faster.speedup,
            "slowdown": faster.hidden,
            "no_pass": faster.no_pass,
            "corrected": [one.as_dict() for one in faster.corrected],
        }
        extra = {**(extra or {}), "hidden_slowdown": found}
        drift = drift or faster.no_pass  # exit 4, as for a machine that slowed
    loaded = busy_regressions(busy or {}, comparisons)
    if busy:
        extra = {**(extra or {}), "busy_runs": busy}
    if loaded:
        notes = notes + [busy_words(loaded)]
        drift = True  # exit 4: a failure whose cause is the machine, never a plain regression
    unsteady = flagged_comparisons(flagged or {}, comparisons)
    if flagged:
        extra = {**(extra or {}), "probe_flagged_runs": flagged}
    if unsteady:
        notes = notes + [flagged_words(unsteady)]
        drift = True  # exit 4 whatever the verdict: neither a plain pass nor a plain regression
    if confirm is not None and result == "regression":
        return confirmed_exit(comparisons, settings, notes, env_notes, args, header, extra, confirm, why)
    print(
        f"verdict: {result.upper()} ({header})"
        + (f"; {len(blind)} comparison(s) cannot see " f"{percent(settings.target)}" if blind else "")
        + (f"; {notes[-1]}" if drift else "")
    )
    if args.summary_md:
        write_atomic(args.summary_md, markdown_summary(comparisons, settings, notes, env_notes, why))
    write_verdict(args, as_json(comparisons, settings, notes, env_notes, extra))
    if result != "pass" or drift:
        return EXIT_DRIFT if drift else EXIT_UNDERPOWERED if result == "inconclusive" else EXIT_FAIL
    return EXIT_UNDERPOWERED if blind and args.fail_underpowered else 0


def write_verdict(args: argparse.Namespace, document: dict) -> None:
    """The verdict as JSON: to `--json-file`, and to the file the CI wrapper names in the environment
    (`gate.ci.VERDICT_FILE_ENV`), which is how it tells a verdict from a crash."""
    from ddpbench.gate.ci import VERDICT_FILE_ENV
    from ddpbench.records.store import write_atomic

    text = json.dumps(document, indent=1) + "\n"
    for path in dict.fromkeys(path for path in (args.json, os.environ.get(VERDICT_FILE_ENV)) if path):
        write_atomic(path, text)


def confirmed_exit(comparisons, settings, notes, env_notes, args, header: str, extra, confirm, why=None) -> int:
    """The first comparison's regression, then its confirmation: the verdict is the confirmation's."""
    from ddpbench.gate.compare import overall_verdict, underpowered
    from ddpbench.gate.output import as_json, format_table, markdown_summary, sight_lines
    from ddpbench.records.store import write_atomic

    print(f"verdict before confirmation: REGRESSION ({header})", flush=True)
    done = confirm(comparisons)
    final = done.comparisons + done.kept
    print(f"confirmation: same-job A/B against {done.base}, {done.rounds} rounds per configuration -> {done.out_dir}")
    if done.comparisons:
        print(format_table(done.comparisons, settings))
    for line in sight_lines(done.comparisons, settings):
        print(f"sight: {line}")
    for note in done.notes:
        print(f"note: {note}")
    result = overall_verdict(final)
    blind = underpowered(done.comparisons)
    answer = {"regression": "confirmed", "pass": "not confirmed"}.get(result, "could not be confirmed")
    print(f"verdict: {result.upper()} (the regression {answer} by a same-job A/B against {done.base}; first: {header})")
    confirmation = {
        **as_json(final, settings, done.notes, []),
        "base": done.base,
        "rounds": done.rounds,
        "out": done.out_dir,
    }
    if args.summary_md:
        first = markdown_summary(comparisons, settings, notes, env_notes, why).replace(
            "## ddpbench gate:", "### Before confirmation:", 1
        )
        second = markdown_summary(final, settings, done.notes, []).replace(
            "## ddpbench gate:", f"### Confirmation against {done.base}, {done.rounds} rounds:", 1
        )
        write_atomic(args.summary_md, f"## ddpbench gate: {result.upper()} ({answer})\n\n{second}\n{first}")
    document = as_json(final, settings, done.notes, env_notes, extra)
    document["before_confirmation"] = as_json(comparisons, settings, notes, env_notes)
    document["confirmation"] = confirmation
    write_verdict(args, document)
    if result != "pass":
        return EXIT_UNDERPOWERED if result == "inconclusive" else EXIT_FAIL
    return EXIT_UNDERPOWERED if blind and args.fail_underpowered else 0


def confirm_step(args: argparse.Namespace, candidate, settings):
    """What `gate_exit` calls on a regression when --confirm-with is given; the base is checked
    here, before anything is compared (bad input: exit 2)."""
    from ddpbench.gate.ab import HERE_REPO, MIN_ROUNDS, check_imports, resolve_side
    from ddpbench.gate.compare import GateError
    from ddpbench.gate.confirm import base_side, confirm
    from ddpbench.gate.user_tree import confirm_base

    if args.confirm_with is None:
        return None
    if args.confirm_rounds < MIN_ROUNDS:
        raise GateError(
            f"--confirm-rounds must be at least {MIN_ROUNDS} (a paired test needs two); got {args.confirm_rounds}"
        )
    commit, base = None, None
    if not os.path.exists(args.confirm_with):
        # A git ref of the user's repository: its worktree is made only if a regression is confirmed.
        commit = confirm_base(args.confirm_with, candidate, sys.executable, HERE_REPO)
        here = commit.candidate
    else:
        base, here = base_side(args.confirm_with), resolve_side("B", HERE_REPO, sys.executable)
    check_imports(base or here)
    out_dir = os.path.abspath(args.confirm_out or os.path.join("results", f"confirm-{time.strftime('%Y%m%d-%H%M%S')}"))

    def confirmed(comparisons):
        try:
            return confirm(
                comparisons,
                candidate,
                commit.base() if commit else base,
                here,
                args.confirm_rounds,
                out_dir,
                settings,
                args.allow_failed_runs,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
                rewrite=commit.rewrite if commit else None,
            )
        finally:
            if commit is not None:
                commit.trees.prune()

    return confirmed


def command_gate(args: argparse.Namespace) -> int:
    from ddpbench.commands.history import gate_series, gate_store
    from ddpbench.gate.baselines import baseline_dir
    from ddpbench.gate.compare import (
        GateError,
        comparability,
        compare,
        compare_values,
        env_differences,
        load_pairs,
        usable,
    )
    from ddpbench.gate.history import (
        DEFAULT_HISTORY,
        HistoryError,
        history_dir,
        leave_out_runs,
        missing_from_history,
        read_history,
        recent_rows,
        sweep_id,
        values_of,
        with_current_keys,
        without_runs,
    )
    from ddpbench.gate.values import MEASURE_NAMES, side_values

    try:
        settings = gate_settings(args)
        measures = tuple(args.metrics or MEASURE_NAMES)
        unknown = [m for m in measures if m not in MEASURE_NAMES]
        if unknown:
            raise GateError(f"unknown metric {unknown[0]!r}; valid: {', '.join(MEASURE_NAMES)}")
        candidate_pairs = load_pairs(args.candidate)
        candidate = [record for _, record in candidate_pairs]
        confirm = confirm_step(args, candidate, settings)
        ok = [r for r in candidate if r.status == "ok"]
        store = gate_store(args)
        if store is None:
            root = args.history or DEFAULT_HISTORY
            folder = args.history_folder or (
                history_dir(ok, args.candidate, root) if os.path.isdir(args.candidate) else None
            )
            wanted = args.baseline == "history" or bool(folder and os.path.isdir(folder))
            found = (read_history(folder) if folder else {}) if wanted else {}
        else:
            folder, found = gate_series(store, ok, args.candidate, args.baseline == "history")
            wanted = args.baseline == "history" or bool(found)
        # Series stored before the one configuration identity match the candidate's configurations.
        found = with_current_keys(found, ok)
        recent, method, own_rows = {}, "", 0
        if wanted:
            # A sweep added to the history before it was gated is there already: its own rows are no
            # evidence about it (as baseline they would pull the verdict toward pass), so the gate
            # sees the history as it was before that `history add`.
            series, own_rows = leave_out_runs(found, sweep_id(args.candidate), candidate)
            recent, method = recent_rows(series)
        own_note = (
            f"left out: {own_rows} history row(s) that are the candidate's own runs (added before this "
            f"gate; a run is no evidence about itself)"
        )
        if args.baseline == "history":
            if not recent and own_rows:
                raise GateError(
                    f"the history in {folder} holds only the candidate's own runs ({own_rows} rows, "
                    f"added with history add): nothing else to compare it with; gate a sweep before "
                    f"adding it, or use --baseline auto or a baseline sweep"
                )
            if not recent and store is not None:
                raise GateError(
                    f"the history store {folder} holds no runs of the candidate's machine class and suite; "
                    "add nightly sweeps with: ddpbench history add SWEEP_DIR"
                )
            if not recent:
                raise GateError(
                    "--baseline history needs a history folder (--history-folder, or a sweep folder "
                    "as --candidate so its machine class and suite name one)"
                )
            baseline_path, env_notes, baseline_records, baseline_pairs = folder, [], [], None
            failures, notes = comparability([], candidate, args.allow_failed_runs, args.allow_missing, False)
            missing, more = missing_from_history(series, candidate, args.allow_missing)
            failures, notes = failures + missing, notes + more
            stored = {key: {m: v for m, v in measured.items() if v} for key, measured in values_of(recent).items()}
            comparisons, more = compare_values(
                stored, side_values([r for r in candidate if usable(r)]), settings, measures, baseline_is_history=True
            )
            comparisons, notes = failures + comparisons, notes + more
            notes.append(f"baseline: the history since each series' last change point ({method})")
            notes += [own_note] if own_rows else []
        else:
            if args.baseline == "auto" and not os.path.isdir(args.candidate):
                # The stored baseline is found by the sweep's machine class and suite; one record has no suite.
                raise GateError(
                    f"--baseline auto needs a sweep folder as --candidate (its machine class and suite "
                    f"name the stored baseline); {args.candidate!r} is a record file: gate it against "
                    "--baseline SWEEP_DIR or RUN.json instead"
                )
            baseline_path = baseline_dir(args.candidate) if args.baseline == "auto" else args.baseline
            if args.baseline == "auto" and not os.path.isdir(baseline_path):
                raise GateError(
                    f"no stored baseline for this machine class and suite at {baseline_path}; "
                    f"save one with: ddpbench history baseline SWEEP_DIR"
                )
            baseline_pairs = load_pairs(baseline_path)
            baseline = baseline_records = [record for _, record in baseline_pairs]
            env_notes = env_differences(baseline, candidate)
            if env_notes and not args.allow_env_mismatch:
                raise GateError(
                    "baseline and candidate ran on different machines or software ("
                    + "; ".join(env_notes)
                    + "); compare like with like, or pass --allow-env-mismatch"
                )
            # The baseline's runs may be in the history too (a nightly saved as baseline): they count
            # once in the noise, as baseline repeats.
            shared = {key: without_runs(rows, sweep_id(baseline_path), baseline) for key, rows in recent.items()}
            twice = sum(map(len, recent.values())) - sum(map(len, shared.values()))
            comparisons, notes = compare(
                baseline,
                candidate,
                settings,
                measures,
                values_of(shared) or None,
                args.allow_failed_runs,
                args.allow_missing,
            )
            if recent:
                notes.append(f"noise also from the history in {folder} since its last change points ({method})")
            notes += [own_note] if own_rows else []
            if twice:
                notes.append(
                    f"left out of the history's noise: {twice} row(s) that are the baseline's runs (counted "
                    f"once, as baseline repeats)"
                )
            notes = env_notes + notes if args.allow_env_mismatch else notes
    except (GateError, HistoryError, ValueError) as exc:
        raise SpecError(str(exc)) from None
    from ddpbench.gate.busy import busy_runs, probe_flagged
    from ddpbench.gate.drift import gate_canary

    flagged = probe_flagged("candidate", candidate)
    for configuration, lines in probe_flagged("baseline", baseline_records).items():
        flagged.setdefault(configuration, []).extend(lines)
    why, more = why_it_slowed(baseline_pairs, candidate_pairs, comparisons, settings, args.candidate)
    notes = notes + more
    from ddpbench.gate.suspect_hosts import suspect_hosts

    # The history's hosts: where a regression's culprit rank ran on a host it names (the store the
    # gate reads, or the default one where it exists).
    suspects, more = suspect_hosts(store, candidate, comparisons, why, sweep_id(args.candidate))
    notes = notes + more

    return gate_exit(
        comparisons,
        settings,
        notes,
        env_notes,
        args,
        f"baseline {baseline_path}, candidate {args.candidate}",
        canary=gate_canary(baseline_path, args.candidate, args.baseline == "history"),
        confirm=confirm,
        busy=busy_runs(candidate),
        flagged=flagged,
        why=why,
        extra={"suspect_hosts": suspects} if suspects else None,
    )


def why_it_slowed(baseline_pairs, candidate_pairs, comparisons, settings, candidate_path: str):
    """(`gate.why.Why` per configuration, notes): the causes compared where the baseline is a sweep
    (or record) whose records are here; against the history, a note where something regressed. The
    verdict never depends on it: where working it out fails, a note says so and the gate answers."""
    from ddpbench.gate.why import explain_changes, from_history

    regressed = any(c.verdict == "regression" for c in comparisons)
    if baseline_pairs is None:
        return None, [from_history()] if regressed else []
    folder = candidate_path if os.path.isdir(candidate_path) else os.path.dirname(os.path.dirname(candidate_path))
    try:
        return explain_changes(baseline_pairs, candidate_pairs, comparisons, settings, folder), []
    except Exception as exc:  # noqa: BLE001 - the verdict stands without the causes
        return None, [f"why it slowed could not be worked out ({type(exc).__name__}: {exc}); the verdict stands"]


def ab_why(out_dir: str, comparisons, settings) -> tuple[list | None, list[str]]:
    """Why B's rounds were slower than A's: the gate's comparison of causes (`why_it_slowed`) over
    the two sides' records, each side's folder of its own; its runs are single DDP runs, so the
    model's own compute is read from their in-process ablation. No reproducing sweep: the A/B is
    its own reproduction."""
    from ddpbench.records.store import read_records

    sides = [read_records(os.path.join(out_dir, side))[0] for side in ("a", "b")]
    found, notes = why_it_slowed(sides[0], sides[1], comparisons, settings, os.path.join(out_dir, "b"))
    for why in found or []:
        why.reproduce = None
    return found, notes


def command_ab(args: argparse.Namespace) -> int:
    from ddpbench.gate.ab import (
        HERE_REPO,
        check_imports,
        paired_comparisons,
        resolve_side,
        run_ab,
        sets_out_or_run_id,
        validate_rounds,
    )
    from ddpbench.gate.compare import GateError
    from ddpbench.gate.user_tree import are_refs, commit_sides
    from ddpbench.running.resolve import resolve

    run_args, trees = args.run_args, None
    try:
        settings = gate_settings(args)
        validate_rounds(args.rounds)
        if sets_out_or_run_id(run_args):
            raise GateError("ab sets --out and --run-id itself; use ab's --out")
        run_parser = OneLineErrorParser(prog="ddpbench ab -- (run options)")
        add_run_arguments(run_parser, script=True)
        resolve(spec_from_args(run_parser.parse_args(run_args)))
        if are_refs(args.a, args.b):
            # Two commits of the user's repository: this ddpbench and this Python on both sides.
            sides, run_args, trees = commit_sides([args.a, args.b], run_args, args.python or sys.executable, HERE_REPO)
            versions = [check_imports(sides[0]).torch] * 2
        else:
            sides = [resolve_side("A", args.a, args.python), resolve_side("B", args.b, args.python)]
            versions = [check_imports(side).torch for side in sides]
    except (GateError, ValueError) as exc:
        if trees is not None:
            trees.prune()
        raise SpecError(str(exc)) from None
    out_dir = args.out = args.out or os.path.join("results", f"ab-{time.strftime('%Y%m%d-%H%M%S')}")
    print(
        f"A: {args.a} (torch {versions[0]}), B: {args.b} (torch {versions[1]}); {args.rounds} rounds -> {out_dir}",
        file=sys.stderr,
    )
    try:
        rounds = run_ab(
            sides[0], sides[1], run_args, args.rounds, out_dir, progress=lambda line: print(line, file=sys.stderr)
        )
    finally:
        if trees is not None:
            trees.prune()
    comparisons, notes = paired_comparisons(rounds, settings, args.allow_failed_runs)
    if not comparisons:
        raise SpecError("; ".join(notes) or "no round produced records to compare")
    why, more = ab_why(out_dir, comparisons, settings)
    return gate_exit(
        comparisons,
        settings,
        notes + more,
        [],
        args,
        f"A {args.a}, B {args.b}, {args.rounds} rounds",
        {"a": {"given": args.a, "torch": versions[0]}, "b": {"given": args.b, "torch": versions[1]}, "out": out_dir},
        why=why,
    )


def add_verdict_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--max-regression", default="5%", help="allowed slowdown: 5, 5%% or 0.05 (default 5%%)")
    add("--family-alpha", default="1%", help="false-alarm rate of the whole comparison (default 1%%)")
    add(
        "--prior-noise",
        default=None,
        help="run-to-run spread to assume where neither repeats nor history measure it (default 15%% on CPU, "
        "3%% on GPUs)",
    )
    add(
        "--allow-failed-runs",
        action="store_true",
        help="leave out candidate runs that failed or failed a correctness check instead of failing",
    )
    add(
        "--fail-underpowered",
        action="store_true",
        help="exit 3 when a comparison is too weak to see its target: twice --max-regression on the log scale "
        "(9.75%% for 5%%), caught 80%% of the time (a slowdown at the threshold itself is caught at most half "
        "the time)",
    )
    add("--summary-md", default=None, metavar="FILE", help="also write a Markdown summary (for a CI job summary)")
    add("--json-file", dest="json", default=None, metavar="FILE", help="also write the verdicts as JSON")
    add_deprecated_option(parser, "--json", dest="json", instead="--json-file FILE")
