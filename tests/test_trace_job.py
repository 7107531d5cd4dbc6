"""`ddpbench trace analyze DIR`: every rank file of a job in parallel processes, a one-screen
summary, and the straggler ranking. Rank files are the real 2-GPU trace with its rank and clock
changed (benchmarks/synthetic.py), a few of them so the tests stay fast."""

import json
import os
import sys

import pytest
from conftest import REPO, ddpbench

from ddpbench.analysis.trace_job import PER_RANK_TABLE_LIMIT, analyze_job, straggler_ranking, trace_files
from ddpbench.analysis.traces import analyze_trace

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import synthetic  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    folder = tmp_path_factory.mktemp("job")
    synthetic.build_traces(str(folder / "traces"), 5, lag_rank=3, lag_ms=7.0)
    return folder / "traces"


def test_a_folder_is_every_trace_in_it_in_rank_order(job):
    assert [os.path.basename(p) for p in trace_files([str(job)])] == [f"rank-{r}.pt.trace.json.gz" for r in range(5)]


def test_parallel_analysis_agrees_with_one_file_at_a_time(job):
    paths = trace_files([str(job)])
    parallel, errors = analyze_job(paths, jobs=2)
    assert errors == [] and [a.rank for a in parallel] == [0, 1, 2, 3, 4]
    one = analyze_trace(paths[2])
    assert parallel[2].summary() == one.summary()


def test_the_straggler_ranking_names_the_late_rank_in_every_step(job):
    analyses, _ = analyze_job(trace_files([str(job)]), jobs=2)
    ranking = straggler_ranking(analyses)
    assert ranking[0]["rank"] == 3 and ranking[0]["last_in_steps"] == ranking[0]["of_steps"] == 2
    # rank 3 is 7 ms late plus its clock offset of 3 x 0.02 ms; the earliest rank has none.
    assert ranking[0]["median_lag_ms"] == pytest.approx(7.06, abs=1e-3)


def test_the_command_prints_a_summary_and_the_table_for_few_ranks(job):
    done = ddpbench("trace", "analyze", "--jobs", "2", str(job))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["rank", "kind"] and len([line for line in lines if "rank-" in line]) == 5
    assert "5 rank traces (gpu, backend nccl, world size 5), 2 profiler steps each" in done.stdout
    assert "rank 3: last in 2 of 2 steps, median 7.060 ms after the first rank" in done.stdout
    # The arrival order is labelled as a cross-check: no line calls it the stragglers.
    assert "arrival order, a cross-check" in done.stdout and "stragglers" not in done.stdout.lower()


def test_one_broken_file_is_named_and_the_others_still_analysed(job, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in os.listdir(job)[:2]:
        os.symlink(job / name, folder / name)
    (folder / "rank-9.pt.trace.json").write_text("not json")
    done = ddpbench("trace", "analyze", "--json", str(folder))
    assert done.returncode == 1
    parsed = json.loads(done.stdout)
    assert len(parsed["ranks"]) == 2 and "rank-9.pt.trace.json" in parsed["unreadable"][0]
    # The arrival order under its own name; the old "stragglers" keys hold the same, deprecated.
    assert parsed["arrival_order"] == parsed["stragglers"] and parsed["arrival_ranking"] == parsed["straggler_ranking"]
    assert parsed["deprecated_keys"] == {"stragglers": "arrival_order", "straggler_ranking": "arrival_ranking"}


def test_a_folder_without_traces_is_a_usage_error(tmp_path):
    done = ddpbench("trace", "analyze", str(tmp_path))
    assert done.returncode == 2 and "no trace files in this folder" in done.stderr


def test_many_ranks_get_the_summary_not_a_line_per_rank(job, tmp_path, monkeypatch):
    from ddpbench.analysis import trace_job

    analyses, _ = analyze_job(trace_files([str(job)]), jobs=1)
    monkeypatch.setattr(trace_job, "PER_RANK_TABLE_LIMIT", 3)
    text = trace_job.format_job_summary(analyses, [])
    assert "rank-0.pt" not in text and "per-rank table: --per-rank" in text
    assert len(text.splitlines()) <= 15
    assert "rank-4.pt" in trace_job.format_job_summary(analyses, [], per_rank=True)
    assert PER_RANK_TABLE_LIMIT == 16


def test_the_traces_exposed_communication_is_labelled_as_the_traces_own_with_its_definition(job):
    """`trace analyze` printed "exposed comm ms/step" and "most exposed communication: rank ..." from
    the trace's own definition, which is not explain's exposed communication (the slowest rank's
    waits in the in-process ablation), without saying so: every figure it prints of it is named as
    the trace's, and the output says once what that is (docs/concepts.md's cross-check)."""
    done = ddpbench("trace", "analyze", "--jobs", "2", str(job))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = lines[0]
    # The per-rank table's column, and every summary line that gives a figure of it.
    assert "trace exposed ms" in header, header
    said = [line for line in lines[1:] if "exposed" in line]
    assert said and all("trace" in line for line in said), said
    assert not any(line.startswith("most exposed communication") for line in lines), done.stdout
    definition = "time inside the collectives' profiler events that no computation overlaps"
    assert sum(definition in line for line in lines) == 1, done.stdout
    assert "not explain's exposed communication" in done.stdout
