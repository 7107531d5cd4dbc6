"""Advice that can be taken: every option that explain's or tune's advice names is one that `run`
and `sweep` accept, and a real sweep runs with all of them at once, each recorded in every run's
spec."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re

import pytest
from conftest import ddpbench

from ddpbench.analysis import answer_text
from ddpbench.cli import build_parser
from ddpbench.config.spec import DDPKnobs
from ddpbench.running import tune

OPTION = re.compile(r"--[a-z][a-z0-9-]+")


def options_of(command: str) -> set[str]:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return {option for action in commands.choices[command]._actions for option in action.option_strings}


def advised_options() -> set[str]:
    """The options named in explain's advice (its text, in the code that writes it) and in tune's
    (what it prints for each variant it tries)."""
    explain = "".join(inspect.getsource(f) for f in (answer_text._advice_for, answer_text.projected_gain))
    given = DDPKnobs()
    tuned = " ".join(tune.knob_flags(knobs, given) for knobs in tune.variants(given).values())
    return set(OPTION.findall(explain)) | set(OPTION.findall(tuned))


def test_every_option_the_advice_names_is_one_run_and_sweep_take():
    advised = advised_options()
    # The check can fail: these are the knobs the advice is about.
    assert {"--static-graph", "--gradient-as-bucket-view", "--bucket-cap-mb", "--comm-hook"} <= advised
    assert {"--threads-per-rank", "--num-workers"} <= advised
    for command in ("run", "sweep", "tune"):
        missing = advised - options_of(command)
        assert not missing, f"ddpbench {command} lacks {', '.join(sorted(missing))}, which the advice names"


def test_threads_per_rank_beyond_the_machine_is_refused(tmp_path):
    done = ddpbench(
        "sweep", "--device", "cpu", "--max-nproc", "2", "--threads-per-rank", "64", "--out", str(tmp_path / "o")
    )
    assert done.returncode == 2 and "--threads-per-rank 64 for 2 processes needs 128 cores" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "o")


@pytest.mark.launches
def test_a_sweep_runs_with_every_knob_the_advice_names(tmp_path):
    done = ddpbench(
        "sweep", "--suite", "smoke", "--repeat", "1", "--strategies", "ddp", "--device", "cpu", "--max-nproc", "2",
        "--static-graph", "--gradient-as-bucket-view", "--bucket-cap-mb", "1", "--comm-hook", "bf16_compress",
        "--num-workers", "1", "--threads-per-rank", "1", "--no-profile",
        "--out", str(tmp_path), "--sweep-id", "knobs",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    runs = sorted(os.listdir(tmp_path / "knobs" / "runs"))
    assert [name for name in runs if name.endswith(".json")] == ["mlp-ddp-n1.json", "mlp-ddp-n2.json"]
    for name in ("mlp-ddp-n1.json", "mlp-ddp-n2.json"):
        record = json.loads((tmp_path / "knobs" / "runs" / name).read_text())
        assert record["status"] == "ok" and not record["error"], record.get("error")
        # Decided where there are replicas to compare: at world size 1 there is one copy.
        assert record["checks"]["replicas_in_sync"]["ok"] is (True if name.endswith("n2.json") else None)
        spec = record["spec"]
        assert spec["ddp"] == {
            "bucket_cap_mb": 1.0,
            "gradient_as_bucket_view": True,
            "static_graph": True,
            "find_unused_parameters": False,
            "broadcast_buffers": True,
            "comm_hook": "bf16_compress",
        }
        assert spec["num_workers"] == 1 and spec["threads_per_rank"] == 1
