"""Installing ddpbench: `make install` on a fresh clone (what it prints is what a newcomer reads
first), and `pip install` or `make bench USE_PYTHON=...` beside the torch an environment already has
(a GPU node's PyTorch container), which must stay as it was."""

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.launches
def test_the_editable_install_prints_no_warning_box(tmp_path):
    # The Makefile's own install line, as make would run it, into an empty environment of its own
    # (the suite's .venv stays as it is for the tests beside this one) and without the dependencies:
    # what is checked is the build of ddpbench itself, where setuptools boxes its notice.
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True)
    planned = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True, text=True, check=True)
    line = next(line for line in planned.stdout.splitlines() if " -e " in line)
    command = shlex.split(line)
    environment = dict(os.environ)
    while "=" in command[0]:  # the line's own VAR=value prefixes
        name, _, value = command.pop(0).partition("=")
        environment[name] = value
    command[1:1] = ["--python", str(tmp_path / "env" / "bin" / "python")]
    command.append("--no-deps")
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr
    assert "*****" not in printed and "Editable installation" not in printed, printed


# make as a user starts it: under `make test USE_PYTHON=...` this suite runs with PYTHONPATH set,
# which the Makefile would keep after the checkout's own.
MAKE_ENVIRONMENT = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}


def test_use_python_runs_every_target_with_the_interpreter_given_and_builds_no_venv():
    python = "/opt/env/bin/python"
    planned = subprocess.run(
        ["make", "-n", "-B", "bench", "test", "test-all", "test-fast", "lint", f"USE_PYTHON={python}", "GPUS=8"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=MAKE_ENVIRONMENT,
    ).stdout.splitlines()
    assert not [line for line in planned if "venv" in line or ".installed-stamp" in line], planned
    prefix = f"PYTHONPATH={ROOT} {python} -m "
    # bench installs what ddpbench needs to run; test, test-all, test-fast and lint the test tools too, once.
    assert [line for line in planned if "torch_env" in line] == [
        f"{prefix}ddpbench.host.torch_env --requirements . --quiet",
        f"{prefix}ddpbench.host.torch_env --requirements . --extra test --quiet",
    ]
    assert f"{prefix}ddpbench sweep --gpus 8" in [line.strip() for line in planned]
    tiers = f'{prefix}pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 -m "not test_all" tests'
    assert tiers in planned  # make test: its tier
    assert f"{prefix}pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15 tests" in planned
    assert f"{prefix}ruff check ." in planned


# What an environment that already has torch holds, made cheaply: torch, torchvision and everything
# they need (the CUDA libraries included), with pip, hard-linked file by file from the suite's own
# environment into a new one, as their RECORD lists them. Each package is a real installation (its
# metadata, RECORD and files), and a file pip replaced or removed shows as a new inode or a gap.
HELD = ("torch", "torchvision")


def requirement_closure(names: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [(name, ()) for name in names]
    while todo:
        name, extras = todo.pop()
        dist = importlib.metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found and not extras:
            continue
        found[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or any(
                requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras)
            ):
                todo.append((requirement.name, tuple(requirement.extras)))
    return list(found.values())


def site_packages(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def fingerprint(site: str) -> dict:
    """Version, RECORD and every file (inode, size, modification time) of torch and torchvision."""
    held = {}
    for dist in importlib.metadata.distributions(path=[site]):
        if dist.metadata["Name"] in HELD:
            files = {}
            for path in dist.files:
                target = os.path.normpath(os.path.join(site, path))
                if target.startswith(site) and os.path.exists(target):
                    status = os.stat(target)
                    files[str(path)] = (status.st_ino, status.st_size, status.st_mtime_ns)
            held[dist.metadata["Name"]] = (dist.version, dist.read_text("RECORD"), files)
    return held


@pytest.fixture(scope="module")
def environment_with_torch(tmp_path_factory):
    """(python, site-packages) of a new environment holding torch and torchvision and nothing of ddpbench's."""
    env = tmp_path_factory.mktemp("torch-env") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = str(env / "bin" / "python")
    site = site_packages(python)
    for dist in requirement_closure((*HELD, "pip")):
        for path in dist.files:
            source = os.path.normpath(str(dist.locate_file(path)))
            target = os.path.normpath(os.path.join(site, path))
            if not target.startswith(site + os.sep) or not os.path.exists(source):
                continue  # console scripts in bin/ name the suite's interpreter; `python -m` is used instead
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                os.link(source, target)
            except OSError:  # another file system
                shutil.copy2(source, target)
    return python, site


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """The files a user's checkout has that an install and `make bench` read."""
    folder = tmp_path_factory.mktemp("checkout") / "ddpbench"
    folder.mkdir()
    for name in ("Makefile", "pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy2(os.path.join(ROOT, name), folder / name)
    for name in ("ddpbench", "workloads"):
        shutil.copytree(os.path.join(ROOT, name), folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def run_ok(command, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def smoke_sweep_ok(folder, runs: list[str]) -> None:
    with open(folder / "manifest.json") as handle:
        manifest = json.load(handle)
    assert manifest["state"] == "finished" and manifest["runs"] == dict.fromkeys(runs, "ok"), manifest


def pip_freeze(python: str) -> dict[str, str]:
    """`pip freeze` of an environment, as name -> version (names normalised)."""
    lines = run_ok([python, "-m", "pip", "freeze", "--all"], timeout=120).stdout.splitlines()
    pairs = (line.split("==", 1) for line in lines if "==" in line)
    return {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in pairs}


def runtime_closure(site: str) -> set[str]:
    """ddpbench's runtime requirements and everything they need, as installed in `site`."""
    from ddpbench.host.torch_env import project_requirements

    wanted = [Requirement(line).name for line in project_requirements(ROOT, ())]
    installed = {
        re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(): dist
        for dist in importlib.metadata.distributions(path=[site])
    }
    found: set[str] = set()
    todo = [re.sub(r"[-_.]+", "-", name).lower() for name in wanted]
    while todo:
        name = todo.pop()
        if name in found or name not in installed:
            continue
        found.add(name)
        for line in installed[name].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(re.sub(r"[-_.]+", "-", requirement.name).lower())
    return found


@pytest.mark.test_all  # make test installs beside a torch below; USE_PYTHON's commands are checked above
# First in this file: its environment then holds torch and torchvision only (the pip install below
# adds ddpbench's requirements to the same environment).
@pytest.mark.launches  # it installs, and sweeps
def test_make_bench_with_use_python_adds_only_what_ddpbench_needs_to_run(environment_with_torch, checkout, tmp_path):
    """`make bench USE_PYTHON=...` into an environment of torch, torchvision and what they need: pip
    freeze afterwards is the same plus ddpbench's runtime requirements and their dependencies, no
    version of what was there changed, and no test tool (it once added 47 packages: playwright,
    ruff, pytest-xdist, accelerate, jsonschema among them)."""
    python, site = environment_with_torch
    before = fingerprint(site)
    frozen = pip_freeze(python)
    sweep = "--suite smoke --strategies ddp --max-nproc 1 --repeat 1 --no-profile --steps 4 --warmup 2"
    sweep += f" --out {tmp_path / 'out'} --sweep-id m"
    done = run_ok(
        ["make", "--no-print-directory", "bench", f"USE_PYTHON={python}", f"BENCH_ARGS={sweep}"],
        cwd=checkout,
        timeout=900,
        env={**MAKE_ENVIRONMENT, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert not (checkout / ".venv").exists()
    torch, vision = before["torch"][0], before["torchvision"][0]
    assert f"ddpbench: keeps torch {torch} and torchvision {vision} of {python} (in {site})" in done.stdout
    assert fingerprint(site) == before
    smoke_sweep_ok(tmp_path / "out" / "m", ["mlp-ddp-n1"])
    after = pip_freeze(python)
    added = {name: version for name, version in after.items() if name not in frozen}
    print("pip freeze, added by make bench:", ", ".join(f"{n}=={v}" for n, v in sorted(added.items())))
    assert {name: after.get(name) for name in frozen} == frozen  # nothing there changed
    closure = runtime_closure(site)
    assert set(added) == closure - set(frozen), (sorted(added), sorted(closure - set(frozen)))
    assert "pandas" not in frozen and "pandas" in added  # the environment lacked them: the diff shows them
    assert not {"ruff", "playwright", "pytest-xdist", "accelerate", "jsonschema", "hypothesis"} & set(after)
    assert "ddpbench" not in after  # the checkout runs from PYTHONPATH, nothing of it is installed
    # It says what it installed: the same packages.
    line = next(line for line in done.stdout.splitlines() if line.startswith("ddpbench: added "))
    assert line == f"ddpbench: added {len(added)} package(s): " + ", ".join(
        f"{name} {version}" for name, version in sorted(added.items())
    )
    assert "for test" not in done.stdout
    # The second time everything is there: nothing is installed, so nothing is fetched.
    again = run_ok(
        ["make", "--no-print-directory", "install", f"USE_PYTHON={python}"], cwd=checkout, env=MAKE_ENVIRONMENT
    )
    assert again.stdout.strip().splitlines()[1:] == [
        f"ddpbench: keeps torch {torch} and torchvision {vision} of {python} (in {site}); "
        "it needs torch 2.5 or later and torchvision 0.20 or later"
    ]
    # make test would add the test tools, and says so (planned only here: they are large downloads).
    planned = run_ok(["make", "-n", "install-test", f"USE_PYTHON={python}"], cwd=checkout, env=MAKE_ENVIRONMENT)
    assert "--requirements . --extra test" in planned.stdout


@pytest.mark.launches  # it installs, and sweeps with what it installed
def test_pip_install_beside_an_environments_torch_keeps_it_and_the_sweep_runs_there(
    environment_with_torch, checkout, tmp_path
):
    python, site = environment_with_torch
    before = fingerprint(site)
    assert sorted(before) == sorted(HELD)
    installed = run_ok([python, "-m", "pip", "install", str(checkout)], timeout=600, cwd=tmp_path)
    # pip says so itself, and the files are the ones that were there.
    torch_version = before["torch"][0]
    assert f"Requirement already satisfied: torch>=2.5.0a0 in {site} (from ddpbench==0.1.0) ({torch_version})" in (
        installed.stdout
    ), installed.stdout
    assert fingerprint(site) == before
    # The installed ddpbench, not a checkout: run from a folder that has none.
    where = run_ok([python, "-c", "import ddpbench; print(ddpbench.__file__)"], cwd=tmp_path).stdout
    assert where.startswith(site), where
    swept = run_ok(
        [os.path.join(os.path.dirname(python), "ddpbench"), "sweep", "--device", "cpu", "--suite", "smoke"]
        + ["--strategies", "ddp", "--nproc", "2", "--repeat", "1", "--no-profile", "--steps", "4", "--warmup", "2"]
        + ["--out", str(tmp_path / "out"), "--sweep-id", "s"],
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert "report: reports/s/index.html" in swept.stdout
    smoke_sweep_ok(tmp_path / "out" / "s", ["mlp-ddp-n1", "mlp-ddp-n2"])
