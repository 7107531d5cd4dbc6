"""The torch an environment has: ddpbench says in one line, before any process starts, when it is
missing, too old, or built without what the runs ask for (CUDA, NCCL)."""

import os
import subprocess
import sys

import pytest
import tomllib
from conftest import REPO, ddpbench_process
from packaging.specifiers import SpecifierSet

from ddpbench.config.errors import SpecError
from ddpbench.host import torch_env

# Versions as NVIDIA's PyTorch images label their builds: a pre-release of the version each becomes,
# with the commit it was built from.
NGC_TORCH = "2.5.0a0+e000cf0ad9"
NGC_VISION = "0.20.0a0"


def test_release_numbers_ignore_pre_release_and_local_labels():
    assert torch_env.release("2.6.0a0+ecf3bae40a") == (2, 6, 0)
    assert torch_env.release("2.14.1+cpu") == (2, 14, 1)
    assert torch_env.release("2.14.1") == (2, 14, 1)
    assert torch_env.release("0.20.0a0") == (0, 20, 0)
    assert torch_env.release(NGC_TORCH) >= torch_env.MINIMUM["torch"]
    assert torch_env.release("2.4.1") < torch_env.MINIMUM["torch"]


def test_pyproject_asks_pip_for_the_minimums_the_check_holds_and_keeps_nvidia_builds():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    for name, label in (("torch", NGC_TORCH), ("torchvision", NGC_VISION)):
        (requirement,) = [d for d in dependencies if d.split(">")[0].split("=")[0].strip() == name]
        specifier = SpecifierSet(requirement[len(name) :])
        assert torch_env.release(str(next(iter(specifier)).version))[:2] == torch_env.MINIMUM[name]
        # pip keeps an installed torch that its requirement contains: NVIDIA's labels included.
        assert specifier.contains(label, prereleases=True), (requirement, label)
        older = f"{torch_env.MINIMUM[name][0]}.{torch_env.MINIMUM[name][1] - 1}.0"
        assert not specifier.contains(older, prereleases=True)


def test_a_gpu_run_needs_a_cuda_build_and_nccl_beyond_one_rank():
    cuda = {"version": "2.14.1", "cuda": "13.0", "hip": None, "nccl": True}
    torch_env.check_gpu_build(8, cuda)
    torch_env.check_gpu_build(8, {**cuda, "cuda": None, "hip": "6.3.42131"})  # ROCm: torch.cuda is HIP
    torch_env.check_gpu_build(1, {**cuda, "nccl": False})  # one GPU talks to no one
    with pytest.raises(SpecError, match=r"torch 2\.14\.1\+cpu \(.*\) is built without CUDA") as cpu_only:
        torch_env.check_gpu_build(1, {**cuda, "version": "2.14.1+cpu", "cuda": None})
    assert "--device cpu" in str(cpu_only.value)
    with pytest.raises(SpecError, match=r"built without NCCL .*: 8 GPU ranks in one process group need it"):
        torch_env.check_gpu_build(8, {**cuda, "nccl": False})
    with pytest.raises(SpecError, match="cannot import it: libcudnn.so.9: cannot open shared object file"):
        torch_env.check_gpu_build(1, {"error": "libcudnn.so.9: cannot open shared object file"})


def test_unmet_reads_the_requirements_as_pyproject_writes_them():
    version = torch_env.installed("torch").version
    assert torch_env.unmet([f"torch>={version}", f"torch=={version}", "torch>=2.5.0a0,<99"]) == ["torch>=2.5.0a0,<99"]
    assert torch_env.unmet(["torch>=99", "no-such-package-xyz>=1", "psycopg[binary]>=3.1"])[:2] == [
        "torch>=99",
        "no-such-package-xyz>=1",
    ]
    # The suite's own environment was installed from pyproject.toml with the test extra.
    assert torch_env.unmet(torch_env.project_requirements(REPO, ("test",))) == []


def stub_packages(folder, **versions):
    """Installed-package metadata alone, as a folder on PYTHONPATH: what the version check reads."""
    for name, version in versions.items():
        info = folder / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return {"PYTHONPATH": str(folder)}


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--workload", "mlp", "--nproc", "2"],
        ["sweep", "--device", "cpu", "--suite", "smoke"],
        ["sweep", "--gpus", "8"],
    ],
)
def test_a_torch_older_than_the_minimum_is_one_line_before_anything_starts(command, tmp_path):
    env = stub_packages(tmp_path / "site", torch="2.1.0", torchvision="0.16.0")
    done = ddpbench_process(*command, "--out", str(tmp_path / "out"), env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"ddpbench {command[0]}: error: torch 2.1.0 is older than 2.5; torchvision 0.16.0 is older than 0.20 "
        f"for {sys.executable} (in {tmp_path / 'site'}): "
        "ddpbench needs torch 2.5 or later and torchvision 0.20 or later"
    ]
    assert sorted(os.listdir(tmp_path)) == ["site"]  # no output folder, no report


def test_the_install_check_says_what_it_keeps_and_refuses_an_old_torchvision(tmp_path):
    module = [sys.executable, "-m", "ddpbench.host.torch_env"]
    kept = subprocess.run(module, capture_output=True, text=True, cwd=REPO)
    torch, vision = torch_env.installed("torch"), torch_env.installed("torchvision")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.strip() == (
        f"ddpbench: keeps torch {torch.version} and torchvision {vision.version} of {sys.executable} "
        f"(in {torch.location}); it needs torch 2.5 or later and torchvision 0.20 or later"
    )
    env = {**os.environ, **stub_packages(tmp_path, torchvision="0.15.2")}
    refused = subprocess.run([*module, "--install", "."], capture_output=True, text=True, cwd=REPO, env=env)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"ddpbench: torchvision 0.15.2 is older than 0.20 for {sys.executable} (in {torch.location}): "
        "ddpbench needs torch 2.5 or later and torchvision 0.20 or later"
    ]


CPU_TORCH = "torch==2.13.0+cpu"
"""A real build of torch without CUDA, from the package cache (PyTorch's CPU wheels)."""


@pytest.fixture(scope="module")
def cpu_only_torch(tmp_path_factory):
    """An interpreter whose torch is a CPU-only build: a venv holding that build alone, and the
    suite's environment behind it (a .pth line) for everything else, so nothing else is installed."""
    env = tmp_path_factory.mktemp("cpu-torch") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = str(env / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True
    ).stdout.strip()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site, CPU_TORCH],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"pip cannot install {CPU_TORCH} here: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    with open(os.path.join(site, "suite-environment.pth"), "w") as handle:
        handle.write(torch_env.installed("torch").location + "\n")
    return python


@pytest.mark.launches  # it installs a torch build
@pytest.mark.parametrize(
    "command",
    [["sweep", "--gpus", "2"], ["run", "--workload", "mlp", "--device", "cuda", "--nproc", "1"]],
)
def test_a_torch_built_without_cuda_is_one_line_for_a_gpu_run(cpu_only_torch, command, tmp_path):
    done = subprocess.run(
        [cpu_only_torch, "-m", "ddpbench", *command, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"ddpbench {command[0]}: error: torch 2.13.0+cpu ({cpu_only_torch}) is built without CUDA "
        "(torch.version.cuda is None): a GPU run needs a CUDA build of torch, such as the one a GPU node's "
        "PyTorch container has; or run on CPU (--device cpu)"
    ]
    assert not (tmp_path / "out").exists()
