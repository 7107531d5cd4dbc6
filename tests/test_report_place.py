"""Where a sweep's report goes: reports/<sweep-id>/ with the id's sub-folders, never over the report
of another sweep (another id whose last part is the same, or the same id under another --out), and
the command says where it went. From a saved sweep: nothing runs."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import FIXTURES

from ddpbench.cli import main
from ddpbench.report.where import OWNER_FILE, report_owner

SWEEP = os.path.join(FIXTURES, "sweeps", "slow-rank")


def saved_sweep(out, sweep_id: str) -> str:
    """The fixture sweep as `out/<sweep_id>`, its manifest keeping the id as a sweep keeps it."""
    folder = os.path.join(str(out), *sweep_id.split("/"))
    shutil.copytree(SWEEP, folder, ignore=shutil.ignore_patterns("traces"))
    manifest = os.path.join(folder, "manifest.json")
    data = json.load(open(manifest)) if os.path.exists(manifest) else {}
    data["sweep_id"] = sweep_id
    with open(manifest, "w") as handle:
        json.dump(data, handle)
    return folder


def report(folder: str, capsys, *extra: str) -> str:
    assert main(["report", folder, *extra]) == 0
    return capsys.readouterr().out.strip()


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_nested_sweep_id_keeps_its_folders_and_never_meets_another_with_the_same_last_part(work, capsys):
    nightly = saved_sweep(work / "results", "nightly/2026-12-01")
    weekly = saved_sweep(work / "results", "weekly/2026-12-01")
    assert report(nightly, capsys) == "report: reports/nightly/2026-12-01/index.html"
    assert report(weekly, capsys) == "report: reports/weekly/2026-12-01/index.html"
    assert report_owner("reports/nightly/2026-12-01/index.html") == os.path.abspath(nightly)
    assert report_owner("reports/weekly/2026-12-01/index.html") == os.path.abspath(weekly)
    assert not os.path.exists("reports/2026-12-01")


def test_one_id_under_two_out_folders_never_overwrites_the_other_sweeps_report(work, capsys):
    first = saved_sweep(work / "a", "nightly")
    second = saved_sweep(work / "b", "nightly")
    assert report(first, capsys) == "report: reports/nightly/index.html"
    before = open("reports/nightly/index.html").read()
    said = report(second, capsys)
    assert said == (
        f"report: {os.path.join(second, 'report', 'index.html')} (reports/nightly holds the report of "
        f"{os.path.abspath(first)}, which is left as it is)"
    )
    assert open("reports/nightly/index.html").read() == before
    assert report_owner(os.path.join(second, "report", "index.html")) == os.path.abspath(second)
    assert os.listdir("reports") == ["nightly"]
    assert sorted(os.listdir("reports/nightly")) == [OWNER_FILE, "index.html"]
    # The first sweep's own report is written again where it was; so is its pytest-benchmark file.
    assert report(first, capsys) == "report: reports/nightly/index.html"
    assert report(first, capsys, "--format", "pytest-benchmark") == "exported: reports/nightly/pytest-benchmark.json"
    assert report(second, capsys, "--format", "pytest-benchmark").startswith(
        f"exported: {os.path.join(second, 'report', 'pytest-benchmark.json')} (reports/nightly holds the report of"
    )


def test_a_report_that_does_not_say_whose_it_is_is_left_alone(work, capsys):
    sweep = saved_sweep(work / "results", "s1")
    os.makedirs("reports/s1")
    with open("reports/s1/index.html", "w") as handle:
        handle.write("<html>someone's page</html>")
    assert "(reports/s1 holds a report that does not say whose it is" in report(sweep, capsys)
    assert open("reports/s1/index.html").read() == "<html>someone's page</html>"


def test_a_sweep_keeps_its_id_with_its_folders_in_its_manifest(work):
    from ddpbench.running.sweep import prepare

    folder = os.path.join("results", "nightly", "2026-12-01")
    manifest, _ = prepare(folder, [], {"suite": "cpu"}, resume=False, sweep_id="nightly/2026-12-01")
    assert manifest["sweep_id"] == "nightly/2026-12-01"
    from ddpbench.report.where import sweep_id_of

    assert sweep_id_of(folder) == "nightly/2026-12-01"
    shutil.move(folder, "moved")  # a folder that no longer ends with its id is named by itself
    assert sweep_id_of("moved") == "moved"


def test_a_sweep_without_a_manifest_is_told_its_id(work, capsys):
    """A TrainJob's sweep folder holds the pods' records and no manifest: its report command names
    the id, and the report follows it; an id the folder does not end with is refused."""
    sweep = saved_sweep(work / "results", "nightly/k8s")
    os.unlink(os.path.join(sweep, "manifest.json"))
    assert report(sweep, capsys) == "report: reports/k8s/index.html"  # the folder's name, told nothing
    assert report(sweep, capsys, "--sweep-id", "nightly/k8s") == "report: reports/nightly/k8s/index.html"
    assert main(["report", sweep, "--sweep-id", "weekly/k8s"]) == 2
    assert "is not the end of the sweep's folder" in capsys.readouterr().err


def test_an_export_alone_is_written_again_where_it_was_and_a_linked_sweep_is_the_same_sweep(work, capsys):
    sweep = saved_sweep(work / "results", "s2")
    # No index.html: the folder's owner file says whose the export is, so the second goes where the first did.
    for _ in range(2):
        assert report(sweep, capsys, "--format", "pytest-benchmark") == "exported: reports/s2/pytest-benchmark.json"
    # The same sweep reached through a symbolic link (a CI workspace's other path) is not another sweep.
    os.symlink(work / "results", work / "linked")
    assert report(str(work / "linked" / "s2"), capsys) == "report: reports/s2/index.html"
