"""`ddpbench comm`: bad input refused in one line, a real 2-rank gloo benchmark of every collective
and element type fitted into a profile, and the half-precision all-reduces given a fresh tensor each
call, as DDP's compression hooks send them."""

from __future__ import annotations

import json
import os

import pytest
from conftest import ddpbench, ddpbench_process

from ddpbench.analysis import network


def test_comm_bad_input_is_one_line_and_exit_2():
    for args, message in (
        (["--nproc", "1"], "at least two processes"),
        (["--max-bytes", "lots"], "not a whole number"),
        (["--collectives", "all_to_all"], "unknown collective"),
        (["--dtypes", "float64"], "unknown element type"),
        (["--device", "cpu", "--backend", "nccl"], "does not go with --device cpu"),
    ):
        result = ddpbench("comm", *args)
        assert result.returncode == 2 and message in result.stderr, result.stderr


@pytest.mark.launches
def test_comm_measures_every_collective_and_fits_a_profile(tmp_path):
    # --device as run and sweep take it: cpu measures gloo.
    result = ddpbench_process(
        "comm",
        "--device",
        "cpu",
        "--max-bytes",
        "64K",
        "--min-iters",
        "3",
        "--max-iters",
        "10",
        "--warmup",
        "2",
        "--seconds-per-size",
        "0.02",
        "--dtypes",
        "float32,bfloat16",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.load(open(tmp_path / "results.json"))
    assert "gloo" in json.dumps(results)
    assert {r["collective"] for r in results["results"]} == set(network.COLLECTIVES)
    for dtype in ("float32", "bfloat16"):
        sizes = sorted(r["bytes"] for r in results["results"] if (r["collective"], r["dtype"]) == ("all_reduce", dtype))
        assert sizes[0] == 8 and sizes[-1] == 64 * 1024 and len(sizes) == 14  # 8 B doubling to 64 KiB
    for row in results["results"]:
        factor = {"all_reduce": 1.0, "reduce_scatter": 0.5, "all_gather": 0.5, "broadcast": 1.0}[row["collective"]]
        # not chance: bus bandwidth is the algorithm bandwidth times the collective's factor, by its formula
        assert row["busbw_bytes_per_s"] == pytest.approx(row["algbw_bytes_per_s"] * factor)
        # not chance: two percentiles of one sample are ordered
        assert row["p50_s"] <= row["p90_s"]
        assert row["fresh_tensor_each_call"] == (row["collective"] == "all_reduce" and row["dtype"] == "bfloat16")
    profile = network.load_profile(str(tmp_path / "profile.json"))
    assert {(f["collective"], f["dtype"]) for f in profile["fits"]} == {
        (c, d) for c in network.COLLECTIVES for d in ("float32", "bfloat16")
    }
    # not chance: a file's size, not a measurement
    assert os.path.getsize(tmp_path / "bandwidth.png") > 1000
    assert "busbw GB/s" in result.stdout


def test_half_precision_all_reduces_get_a_fresh_tensor_every_call_as_the_hooks_send_them():
    torch = pytest.importorskip("torch")
    from ddpbench.worker.comm_bench import call_inputs

    for dtype in (torch.bfloat16, torch.float16):
        whole = torch.ones(1 << 16, dtype=dtype)
        next_input, fresh = call_inputs("all_reduce", str(dtype).removeprefix("torch."), whole)
        first, second = next_input(), next_input()
        assert fresh and first is not whole and second is not first  # a new cast every call, not a cached one
        assert second.dtype == dtype and torch.equal(second, whole)
    # float32 is DDP's reused bucket; other collectives are not what the hooks send.
    for collective, dtype in (("all_reduce", "float32"), ("all_gather", "bfloat16")):
        tensor = torch.ones(16, dtype=getattr(torch, dtype))
        next_input, fresh = call_inputs(collective, dtype, tensor)
        assert not fresh and next_input() is tensor and next_input() is tensor
