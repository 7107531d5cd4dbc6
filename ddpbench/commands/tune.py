"""`ddpbench tune`: the DDP knobs measured around a run, ranked, with what to change. No torch here."""

from __future__ import annotations

import argparse

from ddpbench.commands.arguments import (
    BAD_INPUT,
    INTERRUPTED,
    add_deprecated_option,
    add_run_arguments,
    exit_codes,
    positive_int,
    spec_from_args,
)


def add_tune_parser(commands) -> None:
    tune = commands.add_parser(
        "tune",
        help="the DDP knobs measured around one run, ranked: what to change",
        description="Measure the DDP knobs around one run (bucket cap, bucket view, static graph, compression), "
        "each a real run, in rounds; rank them and say what to change.",
    )
    add_run_arguments(tune)
    exit_codes(
        tune,
        "0 the run as given was measured (the table ranks every variant that ran)",
        "1 the run as given never finished, so nothing can be ranked against it",
        BAD_INPUT,
        INTERRUPTED,
    )
    tune.add_argument(
        "--repeat",
        type=positive_int,
        default=3,
        help="rounds; each runs every variant once (default 3; with 2 only a large, steady "
        "difference can be called real, 5 or more tell small ones)",
    )
    # Its own destination: `profile` is the run option that --no-profile turns off (traces).
    tune.add_argument(
        "--network",
        dest="network_profile",
        default=None,
        metavar="FILE|PRESET",
        help="network profile (ddpbench comm's profile.json) or preset: also project each variant (needs the "
        "runs' traces)",
    )
    add_deprecated_option(tune, "--profile", dest="network_profile", instead="--network FILE|PRESET")
    tune.set_defaults(handler=command_tune, out_dir="results/tune")


def command_tune(args: argparse.Namespace) -> int:
    from ddpbench.running.tune import format_tune, run_tune

    found = run_tune(spec_from_args(args), args.repeat, args.out_dir, args.network_profile)
    print(format_tune(found))
    return 0 if found[0].throughputs else 1
