"""Every old command name and option spelling still works as it did, and says in one line, after
the command's output, what replaces it (docs/commands.md lists them). One test per alias: the
old spelling parses to exactly what the new one does, and where the command is quick, both run
for real and write the same thing."""

from __future__ import annotations

import filecmp
import json
import os

import pytest
from conftest import FIXTURES

from ddpbench.cli import build_parser, main
from ddpbench.commands.arguments import DEPRECATED_DEST

SWEEP = os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")
DDP_RUN = os.path.join(FIXTURES, "projection", "mlp2.json")
TRACES = os.path.join(FIXTURES, "projection", "traces", "mlp2")
RUN_OPTIONS = ["--workload", "mlp", "--device", "cpu", "--nproc", "2"]
TRAINJOB = ["trainjob", "--image", "registry.example/ddpbench:1", "--sweep-id", "k8s", "--suite", "smoke"]

# (old command line, the new one, what the notice names)
OPTIONS = [
    (["explain", SWEEP, "--profile", "ib-100g"], ["explain", SWEEP, "--network", "ib-100g"], "use --network"),
    (["report", SWEEP, "--profile", "ib-100g"], ["report", SWEEP, "--network", "ib-100g"], "use --network"),
    (
        ["project", DDP_RUN, "--world", "4", "--profile", "ib-100g"],
        ["project", DDP_RUN, "--world", "4", "--network", "ib-100g"],
        "use --network",
    ),
    (["tune", *RUN_OPTIONS, "--profile", "ib-100g"], ["tune", *RUN_OPTIONS, "--network", "ib-100g"], "use --network"),
    (
        ["gate", "--baseline", SWEEP, "--candidate", SWEEP, "--json", "v.json"],
        ["gate", "--baseline", SWEEP, "--candidate", SWEEP, "--json-file", "v.json"],
        "use --json-file FILE",
    ),
    (["ab", "a", "b", "--json", "v.json"], ["ab", "a", "b", "--json-file", "v.json"], "use --json-file FILE"),
    (["canary", "--json", "c.json"], ["canary", "--json-file", "c.json"], "use --json-file FILE"),
    (
        ["trace", "merge", TRACES, "--out", "m.json.gz"],
        ["trace", "merge", TRACES, "-o", "m.json.gz"],
        "use -o/--output",
    ),
    (["sweep", "--nproc", "2"], ["sweep", "--max-nproc", "2"], "use --max-nproc N"),
    (["sweep", "--nproc-per-node", "2"], ["sweep", "--max-nproc", "2"], "use --max-nproc N"),
    (["sweep", "--nodes", "1,2"], ["sweep", "--node-counts", "1,2"], "use --node-counts 1,2,4"),
    (["sbatch", "--nproc", "2"], ["sbatch", "--max-nproc", "2"], "use --max-nproc N"),
    (["sbatch", "--nproc-per-node", "2"], ["sbatch", "--max-nproc", "2"], "use --max-nproc N"),
    (["sbatch", "--nodes", "1,2"], ["sbatch", "--node-counts", "1,2"], "use --node-counts 1,2,4"),
    ([*TRAINJOB, "--nproc-per-node", "2"], [*TRAINJOB, "--max-nproc", "2"], "use --max-nproc N"),
    ([*TRAINJOB, "--nproc", "2"], [*TRAINJOB, "--max-nproc", "2"], "use --max-nproc N"),
    ([*TRAINJOB, "--nodes", "1,2"], [*TRAINJOB, "--node-counts", "1,2"], "use --node-counts 1,2,4"),
]


def old_spelling(case) -> str:
    old, new, _ = case
    return " ".join(word for word in old if word not in new or word.startswith("--")).replace(FIXTURES, "")


@pytest.mark.parametrize("old, new, named", OPTIONS, ids=[old_spelling(case) for case in OPTIONS])
def test_an_old_option_spelling_means_what_the_new_one_does_and_says_so(old, new, named):
    parser = build_parser()
    before, after = vars(parser.parse_args(old)), vars(parser.parse_args(new))
    (line,) = before.pop(DEPRECATED_DEST)
    assert before == after
    assert DEPRECATED_DEST not in after
    assert line.startswith(f"{old_spelling((old, new, named)).split()[-1]} is deprecated") and named in line


def run(argv: list[str], capsys) -> tuple[int, str, list[str]]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage error
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def test_explain_json_still_writes_its_per_run_file_and_says_once_after_the_output(tmp_path, capsys):
    """The old spelling keeps its old meaning, the per-run JSON of before 0.2; the new one writes one
    object per configuration."""
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    code, out, err = run(["explain", SWEEP, "--json", str(old)], capsys)
    assert code == 0 and len(err) == 1
    assert err[0].startswith("warning: --json is deprecated and will be removed: use --json-file FILE")
    assert run(["explain", SWEEP, "--json-file", str(new)], capsys)[2] == []
    assert [entry["run_id"] for entry in json.loads(old.read_text())] == ["mlp-ddp-n1", "mlp-ddp-n2"]
    assert [c["configuration"] for c in json.loads(new.read_text())["configurations"]] == ["mlp x1", "mlp x2"]
    assert out.strip().endswith(f"json: {old}")


def test_project_profile_still_projects(capsys):
    code, out, err = run(["project", DDP_RUN, "--world", "4", "--profile", "ib-100g"], capsys)
    assert code == 0 and err == ["warning: --profile is deprecated and will be removed: use --network FILE|PRESET"]
    assert run(["project", DDP_RUN, "--world", "4", "--network", "ib-100g"], capsys)[1] == out


def test_trace_merge_out_still_names_the_file(tmp_path, capsys):
    code, out, err = run(["trace", "merge", TRACES, "--out", str(tmp_path / "old.json.gz")], capsys)
    assert code == 0 and err == ["warning: --out is deprecated and will be removed: use -o/--output FILE"]
    assert out.startswith(f"wrote {tmp_path / 'old.json.gz'}: 2 ranks")


def test_trainjob_old_spellings_write_the_same_manifests(tmp_path, capsys):
    old, new = tmp_path / "old", tmp_path / "new"
    code, _, err = run([*TRAINJOB, "--nproc-per-node", "2", "--nodes", "1,2", "--manifests", str(old)], capsys)
    assert code == 0 and err == [
        "warning: --nproc-per-node is deprecated and will be removed: use --max-nproc N",
        "warning: --nodes is deprecated and will be removed: use --node-counts 1,2,4",
    ]
    assert run([*TRAINJOB, "--max-nproc", "2", "--node-counts", "1,2", "--manifests", str(new)], capsys)[0] == 0
    assert sorted(os.listdir(old)) == sorted(os.listdir(new)) and len(os.listdir(old)) == 2
    assert all(filecmp.cmp(old / name, new / name, shallow=False) for name in os.listdir(old))


def test_export_is_report_format_pytest_benchmark(tmp_path, capsys):
    code, out, err = run(["export", SWEEP, "-o", str(tmp_path / "old.json")], capsys)
    assert code == 0 and out == f"exported: {tmp_path / 'old.json'}\n"
    assert err == [
        "warning: export is deprecated and will be removed: use ddpbench report SWEEP_DIR --format "
        "pytest-benchmark -o FILE"
    ]
    code, _, err = run(["report", SWEEP, "--format", "pytest-benchmark", "-o", str(tmp_path / "new.json")], capsys)
    assert code == 0 and err == []
    assert json.loads((tmp_path / "old.json").read_text()) == json.loads((tmp_path / "new.json").read_text())
    assert json.loads((tmp_path / "new.json").read_text())["benchmarks"]


def test_baseline_save_is_history_baseline(tmp_path, capsys):
    code, out, err = run(["baseline", "save", SWEEP, "--baselines", str(tmp_path / "old")], capsys)
    assert code == 0 and out.startswith(f"baseline saved: {tmp_path / 'old'}")
    assert err == ["warning: baseline save is deprecated and will be removed: use ddpbench history baseline SWEEP_DIR"]
    assert run(["history", "baseline", SWEEP, "--baselines", str(tmp_path / "new")], capsys)[2] == []
    old = sorted(
        os.path.relpath(os.path.join(f, n), tmp_path / "old") for f, _, ns in os.walk(tmp_path / "old") for n in ns
    )
    new = sorted(
        os.path.relpath(os.path.join(f, n), tmp_path / "new") for f, _, ns in os.walk(tmp_path / "new") for n in ns
    )
    assert old == new and any(name.endswith(".json") for name in old)


def test_a_usage_error_on_an_old_spelling_stays_one_line(capsys):
    code, out, err = run(["export", SWEEP], capsys)  # -o is required, as it was
    assert code == 2 and len(err) == 1 and "the following arguments are required: -o/--output" in err[0]
