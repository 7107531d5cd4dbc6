"""The torch this environment has, checked before any process starts: installed, new enough, and
built with what the runs ask for (CUDA for GPUs, NCCL for DDP over more than one GPU).

Versions are read from the installed packages' metadata, without importing torch, so a CPU run's
command line stays fast. CUDA and NCCL are asked of torch itself, imported here lazily and only
when a GPU run is asked for (as `visible_gpu_count` already does on a GPU machine).

As a command, `python -m ddpbench.host.torch_env` says which torch an install beside it keeps, or in
one line why it cannot (exit code 2); with `--install .` it pip installs the project there with
torch and torchvision held where they are (container/Dockerfile does). With `--requirements .` it
installs only what the project needs to run and is missing, nothing of the project itself and no
test tools unless `--extra test` asks for them, and says what it added: `make bench USE_PYTHON=...`
runs the checkout with the user's own environment (PYTHONPATH), which is where the user trains.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from ddpbench.config.errors import SpecError

MINIMUM = {"torch": (2, 5), "torchvision": (0, 20)}
"""The oldest releases ddpbench runs with. pyproject.toml says the same as `>=2.5.0a0`, so that a
pre-release build of 2.5 counts (tests/test_torch_env.py holds the two together)."""


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a version: "2.6.0a0+ecf3bae40a" -> (2, 6, 0). NVIDIA's PyTorch images
    label their torch as a pre-release of the version it becomes, with the commit it was built from
    (2.6.0a0+<commit>), so only the numbers count: a build of 2.5 meets a minimum of 2.5."""
    match = re.match(r"\s*[vV]?(?:\d+!)?(\d+(?:\.\d+)*)", version)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def _dotted(numbers: tuple[int, ...]) -> str:
    return ".".join(map(str, numbers))


def needed() -> str:
    return " and ".join(f"{name} {_dotted(minimum)} or later" for name, minimum in MINIMUM.items())


@dataclass(frozen=True)
class Installed:
    name: str
    version: str | None
    """None where the package is not installed."""
    location: str | None
    """The folder it is installed in (site-packages), as its metadata says."""


def installed(name: str) -> Installed:
    """A package as this interpreter's import path holds it, from its metadata only."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return Installed(name, None, None)
    return Installed(name, dist.version, str(dist.locate_file("")))


def check_installed() -> dict[str, Installed]:
    """torch and torchvision as installed here; SpecError, in one line, where either is missing or
    older than ddpbench needs."""
    found = {name: installed(name) for name in MINIMUM}
    problems = []
    for name, package in found.items():
        if package.version is None:
            problems.append(f"{name} is not installed")
        elif release(package.version) < MINIMUM[name]:
            problems.append(f"{name} {package.version} is older than {_dotted(MINIMUM[name])}")
    if problems:
        where = next((p.location for p in found.values() if p.location), None)
        raise SpecError(
            f"{'; '.join(problems)} for {sys.executable}{f' (in {where})' if where else ''}: "
            f"ddpbench needs {needed()}"
        )
    return found


@functools.cache
def gpu_build() -> dict:
    """What this torch build offers a GPU run, asked of torch itself: its version, the CUDA (or
    ROCm) it was built for, and whether it has NCCL; `error` where torch cannot be imported."""
    try:
        import torch
        import torch.distributed
    except Exception as exc:  # a CUDA library missing from the image, a broken install: said in one line
        return {"error": (str(exc).strip().splitlines() or [type(exc).__name__])[0]}
    distributed = torch.distributed.is_available()
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "nccl": bool(distributed and torch.distributed.is_nccl_available()),
    }


def check_gpu_build(ranks: int, facts: dict | None = None) -> None:
    """SpecError, in one line, where this torch cannot run `ranks` GPU ranks: built without CUDA (or
    ROCm), or without NCCL for more than one rank. `facts` as `gpu_build` returns them."""
    facts = gpu_build() if facts is None else facts
    if facts.get("error"):
        raise SpecError(f"a GPU run needs torch, and {sys.executable} cannot import it: {facts['error']}")
    here = f"torch {facts['version']} ({sys.executable})"
    if not facts.get("cuda") and not facts.get("hip"):
        raise SpecError(
            f"{here} is built without CUDA (torch.version.cuda is None): a GPU run needs a CUDA build of "
            "torch, such as the one a GPU node's PyTorch container has; or run on CPU (--device cpu)"
        )
    if ranks > 1 and not facts.get("nccl"):
        raise SpecError(
            f"{here} is built without NCCL (torch.distributed.is_nccl_available() is False): "
            f"{ranks} GPU ranks in one process group need it; one GPU runs without it (--nproc 1, --gpus 1)"
        )


def check_torch(device: str, ranks: int = 1) -> None:
    """The one check before a run or sweep starts on this machine: torch and torchvision installed
    and new enough, and on `cuda` a build with CUDA, and NCCL where more than one rank talks."""
    check_installed()
    if device == "cuda":
        check_gpu_build(ranks)


# Requirements as pyproject.toml writes them: a name, extras in brackets, then `>=` or `==` clauses.
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*?)\s*$")


def _meets(version: str, clause: str) -> bool | None:
    """Whether an installed version meets one `>=` or `==` clause; None for any other kind."""
    if clause.startswith(">="):
        return release(version) >= release(clause[2:])
    if clause.startswith("=="):
        return version.split("+")[0] == clause[2:].strip()
    return None


def unmet(requirements: list[str]) -> list[str]:
    """The requirements this environment does not meet. Only `>=` and `==` clauses are read (the
    only kinds pyproject.toml uses); any other form counts as unmet, and pip decides."""
    missing = []
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        version = installed(match.group(1)).version if match else None
        clauses = [c.strip() for c in match.group(2).split(",") if c.strip()] if match else []
        if version is None or not all(_meets(version, clause) for clause in clauses):
            missing.append(requirement)
    return missing


def project_requirements(project_dir: str, extras: tuple[str, ...]) -> list[str]:
    """The dependencies in the project's pyproject.toml, and those of the extras named."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: pip carries the same parser
        from pip._vendor import tomli as tomllib
    with open(os.path.join(project_dir, "pyproject.toml"), "rb") as handle:
        project = tomllib.load(handle)["project"]
    optional = project.get("optional-dependencies", {})
    return [*project.get("dependencies", []), *(r for extra in extras for r in optional.get(extra, []))]


def install_beside(project_dir: str, extras: tuple[str, ...], editable: bool, if_needed: bool, quiet: bool) -> int:
    """pip install the project into this environment with its torch and torchvision pinned where
    they are (a constraint, so pip fails rather than replace them); with `if_needed`, nothing when
    every requirement is met already (no pip, no network)."""
    found = check_installed()
    missing = unmet(project_requirements(project_dir, extras))
    if if_needed and not missing:
        return 0
    print(f"ddpbench: installing {project_dir} beside them, with {', '.join(missing) or 'nothing else missing'}")
    with tempfile.NamedTemporaryFile("w", prefix="ddpbench-keep-", suffix=".txt") as keep:
        keep.write("".join(f"{name}=={package.version}\n" for name, package in found.items()))
        keep.flush()
        target = f"{project_dir}[{','.join(extras)}]" if extras else project_dir
        command = [sys.executable, "-m", "pip", "install", *(["--quiet"] if quiet else []), "-c", keep.name]
        done = subprocess.run([*command, *(["-e"] if editable else []), target])
    after = {name: installed(name).version for name in MINIMUM}
    if after != {name: package.version for name, package in found.items()}:  # the constraint forbids it
        print(f"ddpbench: pip changed torch or torchvision: {after}", file=sys.stderr)
        return 1
    return done.returncode


def _distributions() -> dict[str, str]:
    """Every package this environment holds, by its normalised name, with its version."""
    importlib.invalidate_caches()
    return {
        re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(): dist.version
        for dist in importlib.metadata.distributions()
        if dist.metadata["Name"]
    }


def install_requirements(project_dir: str, extras: tuple[str, ...], quiet: bool) -> int:
    """pip install what the project needs to run (and its `extras`) that this environment lacks, with
    torch and torchvision pinned where they are. Nothing of the project itself (its commands run
    from the checkout), nothing already there at a version that meets the requirement (pip leaves a
    met requirement as it is), nothing at all when everything is met; then say what was added."""
    found = check_installed()
    runtime = unmet(project_requirements(project_dir, ()))
    tools = [r for r in unmet(project_requirements(project_dir, extras)) if r not in runtime]
    missing = runtime + tools
    if not missing:
        return 0
    what = ", ".join(runtime) or "nothing"
    print(
        f"ddpbench: installing what it needs to run beside them: {what}"
        + (f"; and, for {' and '.join(extras)}, {', '.join(tools)}" if tools else "")
    )
    before = _distributions()
    with tempfile.NamedTemporaryFile("w", prefix="ddpbench-keep-", suffix=".txt") as keep:
        keep.write("".join(f"{name}=={package.version}\n" for name, package in found.items()))
        keep.flush()
        command = [sys.executable, "-m", "pip", "install", *(["--quiet"] if quiet else []), "-c", keep.name]
        done = subprocess.run([*command, *missing])
    after = _distributions()
    added = sorted(f"{name} {version}" for name, version in after.items() if name not in before)
    changed = sorted(f"{name} {before[name]} -> {after[name]}" for name in before if after.get(name) != before[name])
    print(f"ddpbench: added {len(added)} package(s): {', '.join(added) or 'none'}")
    if changed:
        print(f"ddpbench: pip changed what was there: {', '.join(changed)}", file=sys.stderr)
        return 1
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ddpbench.host.torch_env",
        description="Say which torch and torchvision an install of ddpbench beside them keeps, or why it cannot; "
        "with --install, install it there.",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--install", metavar="PROJECT", help="pip install the project in this folder beside them")
    what.add_argument(
        "--requirements",
        metavar="PROJECT",
        help="pip install only what the project in this folder needs to run and this environment lacks; "
        "say what was added",
    )
    parser.add_argument("--extra", action="append", default=[], help="an extra of the project to install too")
    parser.add_argument("--editable", action="store_true", help="install the project in editable mode")
    parser.add_argument(
        "--if-needed", action="store_true", help="install nothing when every requirement is met already"
    )
    parser.add_argument("--quiet", action="store_true", help="pass --quiet to pip")
    args = parser.parse_args(argv)
    try:
        found = check_installed()
    except SpecError as exc:
        print(f"ddpbench: {exc}", file=sys.stderr)
        return 2
    torch, vision = found["torch"], found["torchvision"]
    print(
        f"ddpbench: keeps torch {torch.version} and torchvision {vision.version} of {sys.executable} "
        f"(in {torch.location}); it needs {needed()}"
    )
    if args.requirements is not None:
        return install_requirements(args.requirements, tuple(args.extra), args.quiet)
    if args.install is None:
        return 0
    return install_beside(args.install, tuple(args.extra), args.editable, args.if_needed, args.quiet)


if __name__ == "__main__":
    sys.exit(main())
