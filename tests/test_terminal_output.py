"""What the terminal shows: ddpbench's own lines when all is well (the processes' output goes to
the run's logs folder), the failing rank's error when not, everything with --verbose, and a
warning plus a record field when a CPU run asks for more threads than there are cores."""

import glob
import json
import os
import re
import shutil

import msgspec
import pytest
from conftest import FIXTURES, REPO, ddpbench_process, foreign_lines

from ddpbench.analysis.frames import format_side_by_side, load, scaling_table, side_by_side
from ddpbench.config.spec import RunSpec
from ddpbench.host.facts import usable_cores
from ddpbench.records.schema import Record
from ddpbench.report.html import build_report
from ddpbench.report.summary import format_summary, relevant_tail
from ddpbench.running.command import child_environment
from ddpbench.running.resolve import oversubscription

CHATTY = f"{REPO}/tests/fixtures/chatty_workload.py:chatty"
CHATTY_LINES = (
    "chatty workload: building the model",
    "chatty workload: a note on stderr",
    "chatty workload: a deprecation the user never fixed",
)


def only_record(out_dir) -> dict:
    paths = glob.glob(str(out_dir / "runs" / "*.json"))
    assert len(paths) == 1, paths
    return json.load(open(paths[0]))


def output_log(record: dict) -> str:
    return open(os.path.join(record["launch"]["logs"], "output.log"), encoding="utf-8").read()


@pytest.mark.launches
def test_three_ranks_on_fewer_cores_warn_once_record_it_and_keep_the_processes_quiet(tmp_path):
    # 3 ranks x cores//2 threads exceed the cores on any machine; on this 2-core one, 3 x 1 on 2.
    cores = usable_cores()
    threads = max(1, cores // 2)
    done = ddpbench_process(
        "run",
        "--workload",
        CHATTY,
        "--nproc",
        "3",
        "--device",
        "cpu",
        "--threads-per-rank",
        str(threads),
        "--steps",
        "6",
        "--warmup",
        "2",
        "--profile-steps",
        "1",
        "--no-sync-steps",
        "0",
        "--out",
        str(tmp_path),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    warning = done.stderr.splitlines()
    assert len(warning) == 1 and "oversubscribed" in warning[0], done.stderr
    assert f"3 processes x {threads} thread" in warning[0] and f"on {cores} usable cores" in warning[0]
    record = only_record(tmp_path)
    assert record["oversubscribed"] == {
        "device": "cpu",
        "processes": 3,
        "threads_per_process": threads,
        "threads": 3 * threads,
        "usable_cores": cores,
    }
    assert "oversubscribed" in done.stdout  # the summary repeats it next to the numbers
    # The workload's prints and warning, and everything else the ranks wrote, are in the log only.
    terminal = done.stdout + done.stderr
    assert not foreign_lines(terminal) and not any(line in terminal for line in CHATTY_LINES), terminal
    log = output_log(record)
    assert all(line in log for line in CHATTY_LINES), log
    # The profiler ran and was quieted at its source (its log level), not filtered out of the text.
    assert record["overlap"]["trace"]["paths"] and "USDT" not in log and "gpuGetDeviceCount" not in log
    assert record["env"]["env_vars"]["KINETO_LOG_LEVEL"] == "6"


@pytest.mark.launches
def test_verbose_streams_everything_the_processes_print(tmp_path):
    done = ddpbench_process(
        "run",
        "--workload",
        CHATTY,
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--steps",
        "6",
        "--warmup",
        "2",
        "--profile-steps",
        "1",
        "--no-sync-steps",
        "0",
        "--verbose",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert all(line in done.stderr for line in CHATTY_LINES), done.stderr
    assert "[default0]:" in done.stderr and "[default1]:" in done.stderr  # torchrun's per-rank prefixes
    assert "profiler_start" in done.stderr  # Kineto at its own level: nothing held back
    record = only_record(tmp_path)
    assert all(line in output_log(record) for line in CHATTY_LINES)
    assert record["oversubscribed"] is None


def spec(**fields) -> RunSpec:
    return RunSpec(**{"workload": "mlp", "device": "cpu", "threads_per_rank": 1, **fields})


def test_oversubscription_counts_threads_of_every_process_against_the_cores():
    assert oversubscription(spec(nproc=3), cores=2) == {
        "device": "cpu",
        "processes": 3,
        "threads_per_process": 1,
        "threads": 3,
        "usable_cores": 2,
    }
    assert oversubscription(spec(nproc=2), cores=2) is None
    assert oversubscription(spec(nproc=2, threads_per_rank=2), cores=2)["threads"] == 4
    # local and DataParallel are one process, whatever nproc says.
    assert oversubscription(spec(strategy="local", threads_per_rank=2), cores=2) is None
    assert oversubscription(spec(strategy="dp", nproc=2, threads_per_rank=2), cores=2) is None
    assert oversubscription(spec(strategy="dp", nproc=2, threads_per_rank=4), cores=2)["processes"] == 1
    assert oversubscription(spec(device="cuda", nproc=3), cores=2) is None


def test_the_profiler_is_quieted_by_its_level_only_when_nobody_asked_to_see_it(monkeypatch, tmp_path):
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    assert child_environment(spec(), str(tmp_path))["KINETO_LOG_LEVEL"] == "6"
    assert "KINETO_LOG_LEVEL" not in child_environment(spec(), str(tmp_path), verbose=True)
    assert "KINETO_LOG_LEVEL" not in child_environment(spec(device="cuda"), str(tmp_path))
    monkeypatch.setenv("KINETO_LOG_LEVEL", "2")
    assert child_environment(spec(), str(tmp_path))["KINETO_LOG_LEVEL"] == "2"  # the user's choice wins


FAILED = msgspec.convert(
    {
        "run_id": "r",
        "status": "failed",
        "spec": {
            "workload": "mlp",
            "size": "tiny",
            "strategy": "ddp",
            "nproc": 2,
            "nnodes": 1,
            "world_size": 2,
            "device": "cpu",
            "threads_per_rank": 1,
            "precision": "fp32",
            "batch_size": 8,
        },
        "error": {
            "message": "rank 1 raised ValueError: bad shape",
            "exit_code": 1,
            "output_tail": ["torchrun's wrapper", "=" * 60],
            "tracebacks": {
                "0": 'Traceback (most recent call last):\n  File "w.py", line 3\nRuntimeError: peer gone',
                "1": 'Traceback (most recent call last):\n  File "w.py", line 9, in f\n'
                "    x = g()\n        ^^^\nValueError: bad shape",
            },
        },
        "launch": {"command": [], "wall_s": 1.0, "exit_code": 1, "logs": "/tmp/out/logs/r"},
    },
    Record,
)


def test_a_failure_shows_the_named_ranks_traceback_and_where_the_logs_are():
    source, tail = relevant_tail(FAILED.error)
    assert source == "rank 1's traceback" and tail[-1] == "ValueError: bad shape" and "^^^" not in "".join(tail)
    text = format_summary(FAILED, "/tmp/out/runs/r.json")
    assert "ValueError: bad shape" in text and "wrapper" not in text and "peer gone" not in text
    assert "logs         /tmp/out/logs/r" in text
    # Without torchrun's error files (a local run), the end of the output is what there is.
    no_files = msgspec.structs.replace(FAILED.error, tracebacks={})
    assert relevant_tail(no_files) == ("end of the output", ["torchrun's wrapper", "=" * 60])


@pytest.fixture
def sweep_with_an_oversubscribed_point(tmp_path):
    folder = tmp_path / "sweep"
    shutil.copytree(os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure"), folder)
    path = folder / "runs" / "mlp-ddp-n2.json"
    record = json.load(open(path))
    record["oversubscribed"] = {
        "device": "cpu",
        "processes": 2,
        "threads_per_process": 2,
        "threads": 4,
        "usable_cores": 2,
    }
    path.write_text(json.dumps(record))
    return folder


def test_the_scaling_table_marks_oversubscribed_points(sweep_with_an_oversubscribed_point):
    table = scaling_table(load(str(sweep_with_an_oversubscribed_point)))
    marked = table[table["oversubscribed"]][["workload", "strategy", "world_size"]].values.tolist()
    assert marked == [["mlp", "ddp", 2]]
    wide = side_by_side(table)
    assert wide.loc[("mlp", 2), "oversubscribed"] == "ddp" and wide.loc[("mlp", 1), "oversubscribed"] == ""
    assert "time-sharing, not scaling" in format_side_by_side(table)
    clean = scaling_table(load(os.path.join(FIXTURES, "sweeps", "cpu-mlp-with-failure")))
    assert not clean["oversubscribed"].any() and "oversubscribed" not in format_side_by_side(clean)


def test_the_report_marks_oversubscribed_points(sweep_with_an_oversubscribed_point, tmp_path):
    page = open(build_report(str(sweep_with_an_oversubscribed_point), str(tmp_path / "r.html"))).read()
    assert "Points marked oversubscribed" in page
    marked = [row for row in page.split("<tr>") if re.search(r'<td [^>]*class="[^"]*text[^"]*"\s*>yes</td>', row)]
    assert len(marked) == 1 and "DDP (2 processes" in marked[0], marked
