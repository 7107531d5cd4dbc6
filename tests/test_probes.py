"""Each process's own probe: the committed CPU sweep with probe readings written into its records,
a run made slow on purpose among them. The table, explain and the gate name it; runs within the
probe's noise, and runs that share a host with their peers, are not flagged. The real slowed
process (a cgroup quota on the local run) is in test_probe_runs.py."""

import json
import os
import shutil

import pytest
from conftest import FIXTURES, ddpbench

from ddpbench.analysis.probes import probe_flags, run_speed
from ddpbench.records.store import read_records

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
QUIET = {"matmul_gflops": 40.0, "copy_gbps": 8.0}


def reading(speed: dict, factor: float) -> dict:
    return {
        "matmul_gflops": speed["matmul_gflops"] * factor,
        "copy_gbps": speed["copy_gbps"] * factor,
        "seconds": 0.12,
        "threads": 1,
        "device": "cpu",
        "version": 1,
    }


def with_probes(tmp_path, factors: dict[str, float], name: str = "sweep", copy_factors=None):
    """The fixture sweep's ok runs, every one's processes probed at QUIET times its factor (default 1, a
    few percent apart run by run, as healthy processes are); `copy_factors` for the copy alone."""
    target = tmp_path / name
    shutil.copytree(SWEEP, target)
    for index, path in enumerate(sorted((target / "runs").iterdir())):
        record = json.loads(path.read_text())
        if record["status"] != "ok":
            path.unlink()  # the gate refuses a side with failed runs
            continue
        factor = factors.get(record["run_id"], 1.0 + 0.02 * (index % 3 - 1))
        for rank in record["ranks"]:
            speed = dict(QUIET)
            if copy_factors and record["run_id"] in copy_factors:
                speed["copy_gbps"] *= copy_factors[record["run_id"]]
            rank["probe"] = {"before": reading(speed, factor), "after": reading(speed, factor * 0.99)}
        path.write_text(json.dumps(record))
    return target


def records_of(folder):
    found, unreadable = read_records(str(folder))
    assert not unreadable
    return [record for _, record in found]


def test_a_slow_local_process_is_named_with_its_factor(tmp_path):
    folder = with_probes(tmp_path, {"mlp-local-n1": 1 / 1.9})
    records = records_of(folder)
    local = next(r for r in records if r.run_id == "mlp-local-n1")
    assert run_speed(local) == pytest.approx({k: v / 1.9 * 0.99**0.5 for k, v in QUIET.items()})  # geometric mean
    [flag] = probe_flags(records)
    assert flag.run_id == "mlp-local-n1" and flag.ratio == pytest.approx(1.9, rel=0.03)
    assert flag.sentence().startswith("the local run of mlp's process ran 1.9x slower on the speed check")
    assert flag.sentence().endswith("its X(1) is the machine's, not the workload's")


def test_processes_within_the_probes_noise_are_not_flagged(tmp_path):
    assert probe_flags(records_of(with_probes(tmp_path, {"mlp-local-n1": 0.9}))) == []


def test_ranks_sharing_a_host_are_compared_only_with_runs_that_do_too(tmp_path):
    # Two ranks probe at once and share the host's memory bandwidth: their copy reads slower, which
    # is the host's, not a slow process (no other run of the sweep has two processes per host).
    folder = with_probes(tmp_path, {}, copy_factors={"mlp-ddp-n2": 0.5})
    assert probe_flags(records_of(folder)) == []


def test_records_without_probes_are_not_judged():
    found, _ = read_records(SWEEP)
    assert probe_flags([record for _, record in found]) == []


def test_the_table_explain_and_the_gate_name_the_slow_process(tmp_path):
    slow = with_probes(tmp_path, {"mlp-local-n1": 1 / 1.9}, name="slow")
    sentence = "the local run of mlp's process ran 1.9x slower on the speed check"
    table = ddpbench("table", str(slow))
    assert f"!! {sentence}" in table.stdout, table.stdout
    explained = ddpbench("explain", str(slow), "--json", str(tmp_path / "why.json"))
    assert f"!! {sentence}" in explained.stdout, explained.stdout
    why = {entry["run_id"]: entry for entry in json.loads((tmp_path / "why.json").read_text())}
    assert any(sentence in line for line in why["mlp-ddp-n2"]["machine"])  # its X(1) is that run
    # The same records on both sides pass; with the candidate's local process flagged, the verdict
    # is the machine's: exit 4 with the figures, never a plain PASS.
    quiet = with_probes(tmp_path, {}, name="quiet")
    assert ddpbench("gate", "--baseline", str(quiet), "--candidate", str(quiet)).returncode == 0
    gate = ddpbench("gate", "--baseline", str(quiet), "--candidate", str(slow), "--json", str(tmp_path / "v.json"))
    assert gate.returncode == 4, gate.stdout + gate.stderr
    assert "ran at another speed than its sweep's others on the speed check" in gate.stdout
    verdict = json.loads((tmp_path / "v.json").read_text())
    flagged = verdict["probe_flagged_runs"]
    assert any("candidate run mlp-local-n1" in line for lines in flagged.values() for line in lines)
    assert "mlp/tiny ddp x2 b8 fp32 cpu" in flagged  # its efficiency divides by the flagged run


def test_the_probe_leaves_the_run_s_random_numbers_as_they_were():
    """A script's process probes after its first step: its own random numbers must not move."""
    import torch

    from ddpbench.worker.probe import process_probe

    torch.manual_seed(7)
    expected = torch.rand(4)
    torch.manual_seed(7)
    found = process_probe(torch.device("cpu"))
    assert found["matmul_gflops"] > 0 and found["copy_gbps"] > 0
    assert torch.equal(torch.rand(4), expected)


# --- the slowed process, whichever it is (stored probes, scaled) ------------------------------------


def _scaled_probes(record, factor: float, ranks=None):
    from msgspec.structs import replace

    found = []
    for rank in record.ranks:
        if rank.probe and (ranks is None or rank.rank in ranks):
            readings = {
                when: replace(
                    reading, matmul_gflops=reading.matmul_gflops * factor, copy_gbps=reading.copy_gbps * factor
                )
                for when in ("before", "after")
                if (reading := getattr(rank.probe, when)) is not None
            }
            rank = replace(rank, probe=replace(rank.probe, **readings))
        found.append(rank)
    return replace(record, ranks=found)


def _mlp_sweep(with_ddp_one: bool):
    """The default suite's mlp runs (local and ddp x2, 3 rounds, probes measured), with DDP x1 runs
    made from the local ones' records where asked (the same processes' probes, one per host)."""
    import dataclasses

    from msgspec.structs import replace

    found = []
    for _, record in read_records(os.path.join(FIXTURES, "sweeps", "cpu-default-suite"))[0]:
        if not record.run_id.startswith("mlp"):
            continue
        found.append(record)
        if with_ddp_one and record.spec.strategy == "local":
            name = record.run_id.replace("local-n1", "ddp-n1")
            found.append(
                replace(record, run_id=name, spec=dataclasses.replace(record.spec, run_id=name, strategy="ddp"))
            )
    return found


@pytest.mark.parametrize("with_ddp_one", [False, True])
def test_every_local_run_held_to_half_speed_is_named_and_no_healthy_run_is(with_ddp_one):
    """Every round's local run slowed to half (as a cgroup's half core does): the speed check names
    the three local runs as slower and never the healthy DDP runs as the odd ones (faster)."""
    records = [_scaled_probes(r, 0.5) if r.spec.strategy == "local" else r for r in _mlp_sweep(with_ddp_one)]
    flags = probe_flags(records)
    assert [flag.run_id for flag in flags] == ["mlp-local-n1-r1", "mlp-local-n1-r2", "mlp-local-n1-r3"], flags
    assert all(flag.ratio > 1 and "slower" in flag.sentence() for flag in flags)


def test_one_ddp_rank_held_to_half_speed_names_its_run():
    records = [
        _scaled_probes(r, 0.5, {1}) if r.run_id == "mlp-ddp-n2-r2" else r for r in _mlp_sweep(with_ddp_one=False)
    ]
    flags = probe_flags(records)
    assert [flag.run_id for flag in flags] == ["mlp-ddp-n2-r2"] and "slower" in flags[0].sentence()
    assert probe_flags(_mlp_sweep(with_ddp_one=False)) == []  # unscaled: nothing to name
