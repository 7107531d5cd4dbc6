"""`ddpbench tune`: a real run of every variant ending with its advice; when a difference is real
and when a knob is advised; and with `--profile`, a profile that cannot serve is refused before any
variant runs, and a projection that cannot be made marks its column unavailable, with the reason,
under the measured table. Apart from the real run nothing is launched: `launch` hands back a saved
2-rank gloo record (mlp tiny)."""

from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

import pytest
from conftest import FIXTURES, ddpbench_process

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


# A quick tune of the tiny MLP on two gloo ranks: the saved record's configuration.
QUICK = ["--workload", "mlp", "--nproc", "2", "--device", "cpu", "--steps", "6", "--warmup", "2"]


def tune_argv(tmp_path, profile: str) -> list[str]:
    return ["tune", *QUICK, "--repeat", "2", "--out", str(tmp_path / "tune"), "--network", profile]


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


@pytest.mark.test_all  # its variants are sweeps, as test_sweep_cpu's in make test; advice is checked below
@pytest.mark.launches
def test_tune_runs_every_variant_and_ends_with_advice(tmp_path):
    result = ddpbench_process("tune", *QUICK, "--repeat", "1", "--no-profile", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    progress = [line for line in result.stdout.splitlines() if line.startswith("tune: round 1/1")]
    assert [line.split("  ")[1].strip() for line in progress] == NAMES and all("samples/s" in p for p in progress)
    table = result.stdout.split(progress[-1], 1)[1]
    for name in NAMES:
        assert f"\n{name} " in table
    # each variant's peak memory per rank beside its throughput, and its change against the run as given
    assert "peak memory/rank" in table
    rows = [line for line in table.splitlines() if line.split("  ")[0].strip() in NAMES]
    assert len(rows) == len(NAMES) and all(" MiB" in row for row in rows)
    assert sum(bool(re.search(r" MiB ([+-]\d+%|0%)", row)) for row in rows) == len(NAMES) - 1
    assert "too few rounds" in table  # one round cannot call a difference real
    # not chance: one round gives no interval, so tune calls no gain real and keeps the settings
    assert table.strip().splitlines()[-1].startswith("advice: keep the settings as given")
    assert len(os.listdir(tmp_path / "runs")) == len(NAMES)


def test_tune_calls_a_difference_real_only_with_significance_beyond_3_percent():
    from ddpbench.running.tune import difference

    base = {0: 100.0, 1: 104.0, 2: 97.0, 3: 101.0}
    wobble = {0: 1.0, 1: 1.004, 2: 0.997, 3: 1.002}  # rounds that agree, but not exactly
    assert difference(base, {r: v * 1.20 * wobble[r] for r, v in base.items()}, tests=6) == "better"
    assert difference(base, {r: v * 0.80 * wobble[r] for r, v in base.items()}, tests=6) == "worse"
    assert difference(base, {r: v * 1.02 * wobble[r] for r, v in base.items()}, tests=6) == "not real"  # below 3 %
    # A 15 % gain on average, but the rounds disagree too much to call it.
    assert difference(base, {0: 140.0, 1: 100.0, 2: 120.0, 3: 100.0}, tests=6) == "not real"
    assert difference(base, {0: 150.0}, tests=6) == "too few rounds"
    assert difference(base, {5: 150.0, 6: 150.0}, tests=6) == "too few rounds"  # no round in common


def test_tune_advice_names_a_knob_only_when_its_gain_is_real():
    from ddpbench.config.spec import DDPKnobs
    from ddpbench.running.tune import Variant, advice

    base = {0: 359.6, 1: 367.8, 2: 351.2}  # measured on this machine: mlp, 2 ranks, 3 rounds
    others = [Variant(f"same {n}", DDPKnobs(), {r: v * (1 + 0.001 * n) for r, v in base.items()}) for n in range(5)]
    view = Variant("gradient_as_bucket_view", DDPKnobs(), {0: 394.2, 1: 393.9, 2: 371.2})
    text = advice([Variant("as given", DDPKnobs(), base), view, *others])
    # Faster in every round (+5.7 to +9.6 %), but 3 rounds at a 5 % family-wise rate over 6
    # variants cannot call it.
    assert text.startswith("advice: keep the settings as given") and "gradient_as_bucket_view measured +9.5%" in text
    clear = Variant(
        "gradient_as_bucket_view", DDPKnobs(gradient_as_bucket_view=True), {r: v * 1.2 for r, v in base.items()}
    )
    # The advice names the option that sets it, as run and sweep spell it.
    assert advice([Variant("as given", DDPKnobs(), base), clear, *others]).startswith(
        "advice: use gradient_as_bucket_view (--gradient-as-bucket-view on run, sweep or trainjob): +20.0% throughput"
    )
    given = DDPKnobs(static_graph=True, comm_hook="bf16_compress")
    bucket = Variant("bucket cap 5 MB", DDPKnobs(bucket_cap_mb=5.0, static_graph=True, comm_hook="bf16_compress"))
    bucket.by_round = {r: v * 1.2 for r, v in base.items()}
    assert "(--bucket-cap-mb 5 on run, sweep or trainjob)" in advice(
        [Variant("as given", given, base), bucket, *others]
    )
    plain = Variant("allreduce", DDPKnobs(static_graph=True), {r: v * 1.2 for r, v in base.items()})
    assert "(--comm-hook allreduce on run" in advice([Variant("as given", given, base), plain, *others])
