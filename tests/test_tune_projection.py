"""`ddpbench tune --profile`: a profile that cannot serve is refused before any variant runs, and a
projection that cannot be made marks its column unavailable, with the reason, under the measured
table. Nothing is launched: `launch` hands back a saved 2-rank gloo record (mlp tiny)."""

from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

import pytest
from conftest import FIXTURES

from ddpbench.analysis.network import load_profile
from ddpbench.cli import main
from ddpbench.running import tune
from ddpbench.running.launch import LaunchResult

RECORD = os.path.join(FIXTURES, "projection", "mlp2.json")
PROFILE = os.path.join(FIXTURES, "projection", "gloo-profile.json")
NAMES = [
    "as given",
    "bucket cap 5 MB",
    "bucket cap 100 MB",
    "gradient_as_bucket_view",
    "static_graph",
    "fp16_compress",
    "bf16_compress",
]
MEASURED = 390.2  # the saved record's throughput, samples/s


def tune_argv(tmp_path, profile: str) -> list[str]:
    return [
        "tune",
        "--workload",
        "mlp",
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--repeat",
        "2",
        "--steps",
        "6",
        "--warmup",
        "2",
        "--out",
        str(tmp_path / "tune"),
        "--profile",
        profile,
    ]


def write_json(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


@pytest.fixture
def launched(monkeypatch, tmp_path):
    """Every variant's run 'finishes' with the saved record (or the one the test puts in place)."""
    fake = SimpleNamespace(runs=[], record=RECORD)

    def launch(spec, show_progress=False):
        fake.runs.append(spec)
        return LaunchResult(spec, 0, 0.0, fake.record)

    monkeypatch.setattr(tune, "launch", launch)
    monkeypatch.chdir(tmp_path)
    return fake


def profile_without_world_size_2(tmp_path) -> str:
    profile = json.load(open(PROFILE))
    profile["fabric"] = None
    for fit in profile["fits"]:
        fit["world_size"] = 4
    return write_json(tmp_path / "only-4.json", profile)


def test_a_profile_that_cannot_predict_the_runs_world_size_is_refused_before_any_variant_runs(
    launched, tmp_path, capsys
):
    code = main(tune_argv(tmp_path, profile_without_world_size_2(tmp_path)))
    out, err = capsys.readouterr()
    assert code == 2 and launched.runs == []
    assert err.strip().splitlines() == [
        "ddpbench tune: error: profile 'gloo-cpu-n2-vm' has no all_reduce at world size 2 (measured: [4]) and no "
        "fabric model to extrapolate with; tune projects every variant at the run's world size, 2: give a profile "
        "measured there, one with a fabric model, or a preset"
    ]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["fabric"].pop("inter_latency_s"), "the fabric lacks inter_latency_s"),
        (lambda p: p["fits"][0].update(world_size=2.5), "world_size must be a whole number >= 1; got 2.5"),
    ],
)
def test_a_malformed_profile_is_refused_before_any_variant_runs(edit, message, launched, tmp_path, capsys):
    profile = json.load(open(PROFILE))
    edit(profile)
    code = main(tune_argv(tmp_path, write_json(tmp_path / "bad.json", profile)))
    err = capsys.readouterr().err
    assert code == 2 and launched.runs == []
    assert len(err.strip().splitlines()) == 1 and err.startswith("ddpbench tune: error: ") and message in err


def measured_rows(out: str) -> dict[str, str]:
    return {name: line for line in out.splitlines() for name in NAMES if line.startswith(f"{name} ")}


def test_a_record_the_profile_cannot_serve_marks_the_column_unavailable_and_keeps_the_table(launched, tmp_path, capsys):
    raw = json.load(open(RECORD))
    raw["timeline"] = None  # as a run made with --no-profile records it
    launched.record = write_json(tmp_path / "no-timeline.json", raw)
    code = main(tune_argv(tmp_path, PROFILE) + ["--no-profile"])
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        "ddpbench tune: note: with --no-profile the runs record no gradient timeline, "
        "so the projection column will be unavailable"
    ]
    assert code == 0 and len(launched.runs) == 2 * len(NAMES)
    rows = measured_rows(out)
    assert sorted(rows) == sorted(NAMES)
    for line in rows.values():
        assert f"{MEASURED:.1f} samples/s" in line and line.rstrip().endswith("unavailable")
    reasons = [line for line in out.splitlines() if line.startswith("projected: unavailable")]
    assert reasons == [
        "projected: unavailable: run mlp2 has no gradient timeline (it ran with --no-profile, failed "
        "before profiling, or was recorded by an older ddpbench); rerun it with profiling on"
    ], out
    assert out.strip().splitlines()[-1].startswith("advice: ")


def test_a_profile_that_serves_fills_the_column(launched, tmp_path, capsys):
    code = main(tune_argv(tmp_path, PROFILE))
    out = capsys.readouterr().out
    assert code == 0
    rows = measured_rows(out)
    assert rows["as given"].rstrip().endswith(" +0.0%")
    assert all(re.search(r" [+-]\d+\.\d%$", line.rstrip()) for line in rows.values()), out
    assert "projected: unavailable" not in out


def variants_measured() -> list[tune.Variant]:
    found = [tune.Variant(name, knobs) for name, knobs in tune.variants(load_record_knobs()).items()]
    for number, variant in enumerate(found):
        variant.by_round = {0: 100.0 + number, 1: 102.0 + number}
        variant.record_paths = [RECORD]
    return found


def load_record_knobs():
    from ddpbench.records.store import load_record

    return load_record(RECORD).spec.ddp


def test_the_projection_step_keeps_what_the_profile_cannot_answer_as_the_reason():
    """The projection step alone, with a profile that cannot serve the record's world size (the
    ProfileError that once escaped after every variant had run and took the table with it)."""
    profile = load_profile(PROFILE)
    profile = dict(profile, fabric=None, fits=[dict(fit, world_size=4) for fit in profile["fits"]])
    found = variants_measured()
    tune.project_variants(found, profile, world_size=2)
    assert all(v.projected is None and "no all_reduce at world size 2" in v.projection_unavailable for v in found)
    table = tune.format_tune(found)
    rows = measured_rows(table)
    assert "107.0 samples/s" in rows["bf16_compress"] and "101.0 samples/s" in rows["as given"]  # measurements stand
    assert sum(line.rstrip().endswith("unavailable") for line in table.splitlines()) == len(NAMES)
    assert [line for line in table.splitlines() if line.startswith("projected:")] == [
        "projected: unavailable: profile 'gloo-cpu-n2-vm' has no all_reduce at world size 2 (measured: [4]) and no "
        "fabric model to extrapolate with"
    ]


def test_without_the_run_as_given_there_is_nothing_to_project_from():
    found = variants_measured()
    found[0].by_round, found[0].record_paths = {}, []
    tune.project_variants(found, load_profile(PROFILE), world_size=2)
    assert all(v.projected is None for v in found)
    assert "projected: unavailable: the run as given did not finish" in tune.format_tune(found)
