"""`make gpu-check-one`'s own pieces, on CPU: bringing what an image lacks from carried wheels (only the
missing packages, only wheels that fit this Python), and the one-rank stall's verdict on a real stall
(the committed gloo run of the same command; on a GPU it goes over NCCL)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import FIXTURES, REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import gpu_check_wheels  # noqa: E402
from gpu_check_one import STALL_STEP, judge_stall  # noqa: E402
from gpu_check_processes import CheckFailed  # noqa: E402

STALL = os.path.join(FIXTURES, "stall", "cpu-one-rank")
HERE = f"cp{sys.version_info.major}{sys.version_info.minor}"


def wheel(folder, dist: str, module: str, tags: str = "py3-none-any") -> str:
    """A wheel as pip downloads them: a zip of the module and its dist-info."""
    path = folder / f"{dist.replace('-', '_')}-1.0-{tags}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{module}/__init__.py", "CARRIED = True\n")
        archive.writestr(f"{dist.replace('-', '_')}-1.0.dist-info/METADATA", f"Name: {dist}\nVersion: 1.0\n")
    return str(path)


@pytest.fixture
def carried(monkeypatch, tmp_path):
    """Two packages this interpreter lacks, and one it has (json), with their wheels carried."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    packages = {"ddpbench-carried-one": "ddpbench_carried_one", "ddpbench-carried-two": "ddpbench_carried_two"}
    monkeypatch.setattr(gpu_check_wheels, "PACKAGES", {**packages, "json-stand-in": "json"})
    folder = tmp_path / "wheels"
    folder.mkdir()
    return folder, packages


def test_only_the_missing_packages_are_unpacked_and_put_first_on_the_path(carried, tmp_path):
    folder, packages = carried
    for dist, module in packages.items():
        wheel(folder, dist, module, "py3-none-any" if dist.endswith("one") else f"{HERE}-{HERE}-manylinux_2_17_x86_64")
    wheel(folder, "json-stand-in", "json")  # carried, but the image has json: never unpacked over it
    site = str(tmp_path / "site")
    found = gpu_check_wheels.install_missing(site, str(folder))
    assert found == {"present": ["json-stand-in"], "installed": list(packages), "site": site}
    dist_info = [f"{dist.replace('-', '_')}-1.0.dist-info" for dist in packages]
    assert sorted(os.listdir(site)) == sorted([*packages.values(), *dist_info])
    assert sys.path[0] == site and os.environ["PYTHONPATH"] == f"{site}{os.pathsep}/elsewhere"
    done = subprocess.run(  # a child process finds them as the checks' processes will
        [sys.executable, "-c", "import ddpbench_carried_one, ddpbench_carried_two, json; print('ok')"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert done.stdout.strip() == "ok", done.stderr
    assert gpu_check_wheels.install_missing(site, str(folder))["installed"] == []  # now nothing is missing


def test_wheels_for_another_python_or_none_at_all_are_said_in_one_line(carried, tmp_path):
    folder, packages = carried
    wheel(folder, "ddpbench-carried-one", "ddpbench_carried_one", "cp39-cp39-manylinux_2_17_x86_64")
    (folder / gpu_check_wheels.MANIFEST).write_text(json.dumps({"python": "3.9", "machine": "x86_64"}))
    with pytest.raises(RuntimeError) as refused:
        gpu_check_wheels.install_missing(str(tmp_path / "site"), str(folder))
    said = str(refused.value)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "\n" not in said and "lacks ddpbench-carried-one, ddpbench-carried-two" in said
    assert "no wheel carried for ddpbench-carried-two" in said and "the carried wheels are for Python 3.9" in said
    assert f"make gpu-check-wheels WHEELS_PYTHON={here} WHEELS_MACHINE=" in said
    assert not (tmp_path / "site").exists()  # nothing unpacked when not everything can be


def test_the_wheels_gpu_check_one_carries_are_its_checks_imports_and_fit_the_carry():
    assert set(gpu_check_wheels.PACKAGES.values()) >= {"numpy", "pandas", "msgspec", "tqdm", "pynvml"}
    assert gpu_check_wheels.CARRY_LIMIT_BYTES == 64 * 2**20
    with open(os.path.join(REPO, ".gitignore"), encoding="utf-8") as handle:
        assert ".gpu-check-wheels/" in handle.read().split()  # fetched when needed, never committed


def test_the_stall_of_a_real_one_rank_run_is_read_from_its_flight_recorder(tmp_path):
    figures: dict = {}
    said = judge_stall(STALL, "stall", "gloo", figures)
    assert said == (
        f"stalled at step {STALL_STEP}, ended at its run timeout; the Flight Recorder dump holds all 14 "
        "collectives the rank issued (8 gloo:all_reduce)"
    )
    assert figures["status"] == "timeout" and figures["collectives"] == 14
    # On a GPU the same run goes over NCCL: a gloo dump is not what it must show.
    with pytest.raises(CheckFailed, match="0 nccl:all_reduce in the dump for 8 steps"):
        judge_stall(STALL, "stall", "nccl", {})


def test_a_dump_that_lost_collectives_the_rank_issued_is_refused(tmp_path):
    run = tmp_path / "stall"
    shutil.copytree(STALL, run)
    dump_path = run / "logs" / "stall" / "hang-dumps" / "flight_recorder_rank_0"
    dump = pickle.loads(dump_path.read_bytes())
    dump["entries"] = dump["entries"][:-3]  # a buffer that kept fewer than the heartbeat counted
    dump_path.write_bytes(pickle.dumps(dump))
    lost = r"the dump holds collectives \[1, 2, 3\]\.\.\.\[9, 10, 11\], the rank had issued 14"
    with pytest.raises(CheckFailed, match=lost):
        judge_stall(str(run), "stall", "gloo", {})
    os.remove(dump_path)
    with pytest.raises(CheckFailed, match="no Flight Recorder dump"):
        judge_stall(str(run), "stall", "gloo", {})


def test_the_bundle_check_bundles_the_folder_and_holds_it_to_the_page(tmp_path):
    """gpu-check-one's own bundle check, through the real command, on a folder laid out as gpu-check's."""
    from gpu_check_one import OneGpuChecker
    from test_gpu_check_bundle import gpu_check_folder

    folder = gpu_check_folder(tmp_path)
    figures: dict = {}
    said = OneGpuChecker(folder, 300).bundle(figures)
    assert said.startswith(f"{folder}-bundle.tar.gz: ") and said.endswith("each one the page lists, no trace")
    assert figures["bytes"] == os.path.getsize(f"{folder}-bundle.tar.gz")
    # Something the page does not list (wheels unpacked into the folder, say) fails the check.
    os.makedirs(os.path.join(folder, "site", "numpy"))
    with open(os.path.join(folder, "site", "numpy", "__init__.py"), "w") as handle:
        handle.write("")
    with pytest.raises(CheckFailed, match=r"files the page does not list \(1\): \['site/numpy/__init__.py'\]"):
        OneGpuChecker(folder, 300).bundle({})
