"""container/Dockerfile, built by benchmarks/container_build.py on a base made offline: the base's
torch stays as it was, and ddpbench runs inside. Where it cannot build, the script says why in one
line; the build itself (10-20 minutes, about 20 GB of disk) runs only when asked for."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

SCRIPT = os.path.join(REPO, "benchmarks", "container_build.py")
ASK = "DDPBENCH_CONTAINER_BUILD"


def test_without_a_builder_the_script_says_why_in_one_line(tmp_path):
    # A PATH with python alone: no podman, no mmdebstrap.
    (tmp_path / "bin").mkdir()
    os.symlink(sys.executable, tmp_path / "bin" / "python")
    done = subprocess.run(
        [sys.executable, SCRIPT, "--no-page"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path / "bin")},
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    if os.geteuid() == 0:
        assert line == "container_build: cannot build here: podman is not installed (Debian: apt-get install podman)"
    else:
        assert line.startswith("container_build: cannot build here: needs root")


def test_the_image_recipe_builds_on_the_base_it_is_given_and_installs_through_the_torch_check():
    with open(os.path.join(REPO, "container", "Dockerfile"), encoding="utf-8") as handle:
        recipe = handle.read()
    instructions = [line.split()[0] for line in recipe.splitlines() if line and not line.startswith((" ", "#"))]
    assert instructions[:2] == ["ARG", "FROM"] and "FROM ${BASE_IMAGE}" in recipe
    # torch is never named to pip: only the check installs, with torch and torchvision held.
    commands = "\n".join(line for line in recipe.splitlines() if not line.startswith("#"))
    assert "-m ddpbench.host.torch_env --install ." in commands and "pip install" not in commands
    # The build context is the checkout's top folder: only what the recipe copies goes in.
    with open(os.path.join(REPO, ".dockerignore"), encoding="utf-8") as handle:
        ignored = [line for line in handle.read().splitlines() if line and not line.startswith("#")]
    copied = {word for line in recipe.splitlines() if line.startswith("COPY") for word in line.split()[1:-1]}
    assert ignored[0] == "*" and {f"!{name}" for name in copied} <= set(ignored)


@pytest.mark.launches
def test_the_image_builds_on_an_offline_base_keeps_its_torch_and_runs_two_ranks(tmp_path):
    if not os.environ.get(ASK):
        pytest.skip(f"the image build takes 10-20 minutes and about 20 GB of disk: set {ASK}=1 to run it")
    done = subprocess.run(
        [sys.executable, SCRIPT, "--no-page", "--json", str(tmp_path / "found.json")],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode == 2:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "found.json", encoding="utf-8") as handle:
        found = json.load(handle)
    assert found["torch_unchanged"] and found["held_files_changed"] == []
    # not chance: the torch version the image pins against the one installed, read from files
    assert found["held"]["image"]["torch"][0] == found["versions"]["torch"]
    assert found["help"].startswith("usage: ddpbench")
    output = found["run"]["output"]
    assert found["run"]["exit_code"] == 0 and "  throughput " in output and "  checks " in output, output
