"""The projection validation's page is written from the analysis alone: its header, its method's
counts and every summary sentence come from the values given, and an empty group says so rather than
printing a number. A hand-made analysis result; no runs are launched."""

import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from projection_validation import page, summarise  # noqa: E402

MIB = 2**20


def replay(run: str, measured_s: float, modelled_s: float) -> dict:
    return {
        "workload": "mlp",
        "kind": "replay",
        "case": "replay of the run itself",
        "targets": [run],
        "projected_s": modelled_s,
        "modelled_s": modelled_s,
        "measured_s": measured_s,
        "error": modelled_s / measured_s - 1,
        "spread": 0.06,
        "timeline_step_s": measured_s,
    }


def bucket(run: str, wire_bytes: int, trace_s: float, predicted_s: float, alone_s: float | None) -> dict:
    return {
        "run": run,
        "workload": "mlp",
        "profiled_over_timed": 1.25,
        "bucket": 0,
        "bytes": wire_bytes,
        "wire_bytes": wire_bytes,
        "steps": 4,
        "trace_s": trace_s,
        "predicted_s": predicted_s,
        "error": predicted_s / trace_s - 1,
        "alone_steps": 0 if alone_s is None else 2,
        "alone_s": alone_s,
        "alone_error": None if alone_s is None else predicted_s / alone_s - 1,
        "replayed_s": trace_s,
        "replay_error": 0.0,
    }


def ran(**changes) -> dict:
    return {
        "count": 3,
        "failed": 0,
        "workloads": ["mlp"],
        "world_sizes": [2],
        "runs_per_case": [1],
        "knobs": ["fp16_compress"],
        "steps": [14],
        "warmup": [3],
        "profile_steps": [4],
        "commits": ["abc1234"],
        "machines": ["2 cores (AMD EPYC), Linux 6.1"],
        "first_started": "2026-12-03T10:00:00.000+00:00",
        "last_ended": "2026-12-03T10:05:00.000+00:00",
        "profile_name": "comm",
        "profile_backend": "gloo",
        "profile_world_sizes": [2],
        "profile_dtypes": ["bfloat16", "float16", "float32"],
        "profile_max_bytes": 64 * MIB,
        **changes,
    }


HEADER = {
    "commit": "abc1234",
    "command": "python benchmarks/projection_validation.py --out results/pv --rounds 1",
    "date": "2026-12-03 10:06 UTC",
    "measured": {"commands": 3, "seconds": 330.0},
}


def analysis(cases: list[dict], trace: list[dict], **ran_changes) -> dict:
    return {
        "summary": summarise(cases, trace),
        "cases": cases,
        "trace": trace,
        "profile": "comm",
        "ran": ran(**ran_changes),
    }


def test_the_page_carries_its_header_method_and_the_figures_given():
    cases = [
        replay("mlp-base-r1", 0.040, 0.036),  # -10 %, outside the 6 % spread
        replay("mlp-base-r2", 0.040, 0.042),  # +5 %, within it
        {
            **replay("mlp-fp16-r1", 0.050, 0.045),
            "kind": "what-if",
            "case": "fp16_compress",
            "projected_s": 0.051,
            "error": 0.051 / 0.050 - 1,
        },
    ]
    trace = [
        bucket("mlp-base-r1", 16 * MIB, 0.015, 0.012, 0.0135),  # ran alone, large: profile short by 11.1 %
        bucket("mlp-base-r2", 16 * MIB, 0.016, 0.012, None),  # never alone
    ]
    text = page(analysis(cases, trace), HEADER)
    prose = " ".join(text.split())  # the page wraps its prose
    assert text.startswith("# `ddpbench project` against real runs\n")
    assert "- **Commit**: abc1234.\n" in text
    assert "- **Machine**: 2 cores (AMD EPYC), Linux 6.1; every measurement command wrapped in `flock" in text
    assert "- **Command**: `python benchmarks/projection_validation.py --out results/pv --rounds 1` (" in text
    assert "the measurement took 5.5 minutes for 3 commands" in text
    assert "the runs ran from 2026-12-03 10:00 UTC to 2026-12-03 10:05 UTC" in text
    # The method's counts are the runs' own.
    assert "Each run took 14 steps, of which 3 warm-up, then 4 profiled steps." in prose
    assert "3 real runs of mlp at world size 2, in 1 round" in prose
    assert "(bfloat16, float16 and float32, up to 64 MiB" in prose
    # Each summary sentence is the figures given.
    assert (
        "**(a) Replays from parts: mean absolute error 7.5% over 2, within the spread of the default runs for 1 of 2.**"
        in prose
    )
    assert "Short of the timed step in 1 of 2; the worst is -10.0% (mlp-base-r1)." in prose
    assert "**(b) What-ifs: mean absolute error 2.0% anchored and 10.0% from parts alone, over 1 case.**" in prose
    assert "Spread of the default runs ((max - min) / median): 6.0% for mlp (2 runs)." in prose
    assert (
        "of at least 8 MiB on the wire**: 11.1% over 1; the profile was shorter than the trace in 1 of them." in prose
    )
    assert "median of 1.25 times the timed steps for mlp (1.25 to 1.25 over 2 runs)." in prose
    # An empty group reads as no runs, not as a number.
    assert "**Smaller buckets that ran alone in some steps**: no runs to tell." in prose


def test_with_no_runs_every_figure_says_so():
    text = page(analysis([], [], count=0, commits=[], machines=[], first_started=None, last_ended=None), HEADER)
    prose = " ".join(text.split())
    assert "**(a) Replays from parts**: no runs to tell" in prose
    assert "**(b) What-ifs**: no runs to tell" in prose
    assert "**(c) Buckets in the traces**: no runs to tell" in prose
    assert "The profiler's slowdown of the profiled steps: no runs to tell." in prose
    assert "%" not in text.split("## Why a replay misses", 1)[1]


def test_runs_from_another_commit_are_named_and_analyse_only_says_it_measured_nothing():
    header = {**HEADER, "commit": "def5678 with uncommitted changes to tracked files", "measured": None}
    text = page(analysis([], []), header)
    assert (
        "- **Commit**: def5678 with uncommitted changes to tracked files (the analysis); the runs: abc1234.\n" in text
    )
    assert "the runs were already in the folder; this command analysed them" in text
