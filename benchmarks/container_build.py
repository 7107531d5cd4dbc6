"""Build container/Dockerfile on a PyTorch base made offline, and check ddpbench inside it.

No container registry is reached, and neither the base nor the build has a network. First pip
downloads, on this machine (from its package cache), the wheels of torch and torchvision at the
versions in constraints.txt and of everything else ddpbench needs, into one folder. The base stands
in for a GPU node's PyTorch image: a Debian root filesystem made by mmdebstrap from Debian's
packages, holding python3 and a virtual environment (/opt/torch) with torch and torchvision,
installed with `pip --no-index` from that folder. `podman import` makes it an image, and `podman
build --network none` builds container/Dockerfile on it, with BASE_IMAGE set to that image and the
same folder mounted as the recipe's WHEELS. Then, inside the image:

- the base's torch and torchvision are still there, unchanged: the same versions, the same RECORD,
  and `podman diff` of the base and the image lists no file of theirs;
- `ddpbench --help` runs;
- `ddpbench run --workload mlp --nproc 2 --device cpu` (two ranks under torchrun, gloo, no network
  but the container's loopback) passes its checks: exit code 0.

Needs root, podman and mmdebstrap (Debian: `apt-get install podman mmdebstrap`; runc too where the
machine mounts cgroup v1 and v2 together, which crun refuses), about 20 GB of free disk while it
runs, and 10-20 minutes. Where it cannot build, it says why in one line and exits 2. It holds
/tmp/ddpbench-bench.lock (benchmarks/bench_lock.py) throughout, as the measurements do: a build
takes the machine.

Prints the page and writes it to --page (docs/measurements/container-build.md; --no-page only
prints); --json writes what it found for tests/test_container.py. The images are removed at the
end unless --keep.

    python benchmarks/container_build.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_lock import LOCK, bench_lock  # noqa: E402
from measurement_page import add_page_options, command_line, utc_now, write_page  # noqa: E402

from ddpbench.host.facts import cpu_model, project_git, usable_cores  # noqa: E402
from ddpbench.host.torch_env import project_requirements  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "container-build.md")
DOCKERFILE = os.path.join("container", "Dockerfile")
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_IMAGE = "localhost/ddpbench-offline-base:torch-{torch}"
IMAGE = "localhost/ddpbench:container-build-check"
VENV = "/opt/torch"
PATH_IN_BASE = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUN = ["ddpbench", "run", "--workload", "mlp", "--nproc", "2", "--device", "cpu", "--out", "/tmp/ddpbench-out"]
WIDTH = 100

# Inside an image: torch's and torchvision's versions, a hash of each RECORD, and where they are.
HELD_SCRIPT = """
import hashlib, importlib.metadata as m, json
print(json.dumps({n: [m.version(n), hashlib.sha256(m.distribution(n).read_text("RECORD").encode()).hexdigest(),
                      str(m.distribution(n).locate_file(""))] for n in ("torch", "torchvision")}))
"""


class Unavailable(Exception):
    """The image cannot be built here; the message says why."""


def pinned_versions() -> dict[str, str]:
    """torch's and torchvision's versions in constraints.txt: what the base holds."""
    versions = {}
    with open(os.path.join(REPO, "constraints.txt"), encoding="utf-8") as handle:
        for line in handle:
            name, _, version = line.strip().partition("==")
            if name in ("torch", "torchvision"):
                versions[name] = version
    return versions


def podman_options() -> list[str]:
    """What `podman run` and `podman build` need on this kind of machine. podman's default limits
    (1,048,576 open files, 4,194,304 processes) exceed what a process here may raise its own to, and
    conmon, which starts the container, holds at most pid_max processes: ask for no more than both.
    crun refuses hybrid cgroups (v1 controllers with v2 mounted beside them); runc runs there."""
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    try:
        with open("/proc/sys/kernel/pid_max", encoding="utf-8") as handle:
            pid_max = int(handle.read())
    except (OSError, ValueError):
        pid_max = processes
    processes = pid_max if processes == resource.RLIM_INFINITY else min(processes, pid_max)
    files = 1048576 if files == resource.RLIM_INFINITY else files
    return [f"--ulimit=nofile={files}:{files}", f"--ulimit=nproc={processes}:{processes}"]


def global_options() -> list[str]:
    hybrid = os.path.isdir("/sys/fs/cgroup/unified") and os.path.isdir("/sys/fs/cgroup/cpu")
    return ["--runtime", "runc"] if hybrid else []


def check_tools() -> dict:
    """The tools' versions, or Unavailable naming the first that is missing or cannot run."""
    if os.geteuid() != 0:
        raise Unavailable("needs root: mmdebstrap's chroot, the bind mount of the wheels and rootful podman")
    for tool, package in (("podman", "podman"), ("mmdebstrap", "mmdebstrap")):
        if shutil.which(tool) is None:
            raise Unavailable(f"{tool} is not installed (Debian: apt-get install {package})")
    if global_options() and shutil.which("runc") is None:
        raise Unavailable(
            "this machine mounts cgroup v1 and v2 together, which crun refuses: install runc (apt-get install runc)"
        )
    info = subprocess.run(["podman", *global_options(), "info", "--format", "json"], capture_output=True, text=True)
    if info.returncode != 0:
        raise Unavailable(f"podman cannot run here: {(info.stderr.strip().splitlines() or ['no output'])[-1]}")
    tools = {}
    for tool in ("podman", "mmdebstrap", "runc"):
        if shutil.which(tool):
            done = subprocess.run([tool, "--version"], capture_output=True, text=True)
            tools[tool] = (done.stdout.strip().splitlines() or ["?"])[0]
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < 20 * 2**30:
        raise Unavailable(f"needs about 20 GB of free disk; {tempfile.gettempdir()} has {free / 2**30:.1f} GB")
    return tools


def step(steps: list, name: str, command: list[str], timeout: float = 1800, **kwargs) -> subprocess.CompletedProcess:
    """Run one step, keep its command, time and exit code; its output goes to the terminal too."""
    print(f"container_build: {name}: {shlex.join(command)}", file=sys.stderr)
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    steps.append(
        {
            "name": name,
            "command": shlex.join(command),
            "seconds": time.monotonic() - start,
            "exit_code": done.returncode,
        }
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{name} failed (exit code {done.returncode}):\n{tail}")
    return done


def image_size(image: str) -> int:
    done = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Size}}", image], capture_output=True, text=True
    )
    return int(done.stdout.strip() or 0)


def build_and_check(work: str, keep: bool) -> dict:
    versions = pinned_versions()
    base = BASE_IMAGE.format(torch=versions["torch"])
    steps: list[dict] = []
    found: dict = {"versions": versions, "base_image": base, "image": IMAGE, "steps": steps}
    wheels = os.path.join(work, "wheels")
    rootfs = os.path.join(work, "base.tar")
    pins = [f"{name}=={version}" for name, version in versions.items()]
    podman = ["podman", *global_options()]
    try:
        # One folder for the base and the build: torch, torchvision, ddpbench's libraries, and the
        # setuptools that builds ddpbench (pip fetches it for the build in an environment of its own).
        needs = [r for r in project_requirements(REPO, ()) if r.split(">")[0].split("=")[0] not in versions]
        step(
            steps,
            "wheels",
            [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", wheels]
            + [*pins, "setuptools>=68", *needs],
        )
        found["wheels_bytes"] = sum(os.path.getsize(os.path.join(wheels, name)) for name in os.listdir(wheels))
        # The chroot gets the wheels through a bind mount, and installs from them alone.
        install = (
            f'chroot "$1" python3 -m venv {VENV} && mkdir "$1/wheels" '
            f'&& mount --bind {shlex.quote(wheels)} "$1/wheels" '
            f'&& {{ chroot "$1" {VENV}/bin/pip install --quiet --no-cache-dir --no-index --find-links /wheels '
            f'{" ".join(pins)}; status=$?; umount "$1/wheels"; rmdir "$1/wheels"; exit $status; }}'
        )
        step(
            steps,
            "base root file system",
            ["mmdebstrap", "--variant=minbase", "--include=python3,python3-venv", f"--customize-hook={install}"]
            + [SUITE, rootfs, MIRROR],
        )
        found["rootfs_bytes"] = os.path.getsize(rootfs)
        step(
            steps,
            "base image",
            [*podman, "import", "--change", f"ENV PATH={PATH_IN_BASE}", "--change", 'CMD ["python"]', rootfs, base],
        )
        os.remove(rootfs)
        step(
            steps,
            "ddpbench image",
            # No intermediate images or containers are left behind, whether the build passes or fails.
            [*podman, "build", "--layers=false", "--force-rm", *podman_options(), "--network", "none"]
            + ["-f", DOCKERFILE, "-v", f"{wheels}:/wheels:ro"]
            + ["--build-arg", f"BASE_IMAGE={base}", "--build-arg", "WHEELS=/wheels", "-t", IMAGE, "."],
            cwd=REPO,
        )
        found["sizes"] = {"base": image_size(base), "image": image_size(IMAGE)}
        run = [*podman, "run", "--rm", *podman_options()]
        held = {}
        for name, image in (("base", base), ("image", IMAGE)):
            done = step(steps, f"torch in the {name}", [*run, "--network", "none", image, "python", "-c", HELD_SCRIPT])
            held[name] = json.loads(done.stdout.strip().splitlines()[-1])
        found["held"] = held
        diff = step(steps, "podman diff of the base and the image", [*podman, "diff", base, IMAGE])
        folders = {entry[2] for entry in held["base"].values()}
        changed = [line for line in diff.stdout.splitlines() if any(f" {f}/torch" in line for f in folders)]
        found["held_files_changed"] = changed
        found["torch_unchanged"] = held["base"] == held["image"] and not changed
        found["help"] = step(steps, "ddpbench --help", [*run, "--network", "none", IMAGE, "ddpbench", "--help"]).stdout
        try:
            done = step(
                steps,
                "a 2-rank CPU run",
                [*run, "--network", "none", "--shm-size", "1g", IMAGE, *RUN],
            )
            found["run"] = {"exit_code": 0, "output": done.stdout + done.stderr}
        except RuntimeError as exc:
            found["run"] = {"exit_code": steps[-1]["exit_code"], "output": str(exc)}
    finally:
        if not keep:
            for image in (IMAGE, base):
                subprocess.run([*podman, "rmi", "--force", image], capture_output=True)
        shutil.rmtree(wheels, ignore_errors=True)
        if os.path.exists(rootfs):
            os.remove(rootfs)
    return found


def gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB"


def wrap(text: str) -> str:
    return textwrap.fill(text, WIDTH, break_on_hyphens=False, break_long_words=False)


def page(found: dict) -> str:
    versions = found["versions"]
    torch, vision = versions["torch"], versions["torchvision"]
    seconds = {entry["name"]: entry["seconds"] for entry in found["steps"]}
    lines = [
        "# The container image, built on a base made offline",
        "",
        wrap(
            "Written by `benchmarks/container_build.py`, which built `container/Dockerfile` on a stand-in for a "
            "GPU node's PyTorch image and checked ddpbench inside it; rerun it to build again. How to build the "
            "image on your own base: [Install beside your torch](../install.md#a-container-image)."
        ),
        "",
        f"- **Commit**: {found['git_sha'][:7] if found.get('git_sha') else 'not recorded'}"
        + (" (with uncommitted changes)" if found.get("git_dirty") else "")
        + ".",
        wrap(
            f"- **Machine**: {found['cores']} cores ({found['cpu_model']}), {found['kernel']}, no GPU; "
            f"{', '.join(found['tools'].values())}; from {found['started']} to {found['ended']}."
        ).replace("\n", "\n  "),
        f"- **Command**: `{found['command']}`, as root ({found['minutes']:.1f} minutes, holding "
        f"`flock {LOCK}` throughout, taken by {found['lock']}).",
        "",
        "## What it built",
        "",
        wrap(
            f"The base: Debian {SUITE} (`mmdebstrap --variant=minbase --include=python3,python3-venv`, from "
            f"Debian's packages), with torch {torch} and torchvision {vision} in a virtual environment at "
            f"`{VENV}`, first on `PATH`. pip downloaded their wheels, and those of everything else ddpbench needs, "
            f"on this machine into one folder ({gb(found['wheels_bytes'])}, from its package cache), and the chroot "
            f"installed torch and torchvision with `pip install --no-index --find-links` from a bind mount of that "
            f"folder: no network, no registry. "
            f"`podman import` made the root file system ({gb(found['rootfs_bytes'])}) the image "
            f"`{found['base_image']}`."
        ),
        "",
        wrap(
            "The image: `podman build --network none -v <that folder>:/wheels:ro -f container/Dockerfile "
            f"--build-arg BASE_IMAGE={found['base_image']} --build-arg WHEELS=/wheels .` "
            f"({gb(found['sizes']['image'])} against the base's {gb(found['sizes']['base'])}). pip installed "
            "ddpbench and its other libraries from that folder alone, with torch and torchvision held where "
            "they were by a constraint."
        ),
        "",
        "| step | seconds |",
        "|---|---|",
        *(f"| {name} | {value:.0f} |" for name, value in seconds.items()),
        "",
        "## What it checked inside",
        "",
    ]
    held = found["held"]
    same = "the same" if found["torch_unchanged"] else "NOT the same"
    lines += [
        wrap(
            f"- torch and torchvision are {same} in the base and in the image: torch {held['image']['torch'][0]} "
            f"and torchvision {held['image']['torchvision'][0]}, with RECORD hashes "
            f"{held['image']['torch'][1][:12]}... and {held['image']['torchvision'][1][:12]}... in both, and "
            f"`podman diff` of the two images lists {len(found['held_files_changed'])} changed file"
            f"{'' if len(found['held_files_changed']) == 1 else 's'} of theirs."
        ).replace("\n", "\n  "),
        f"- `ddpbench --help` starts with `{found['help'].strip().splitlines()[0]}`.",
        wrap(
            f"- `{shlex.join(RUN)}`, with `--network none` (only the container's loopback) and a 1 GB /dev/shm: "
            f"exit code {found['run']['exit_code']}"
            + (" (its checks passed)." if found["run"]["exit_code"] == 0 else " (FAILED).")
        ).replace("\n", "\n  "),
        "",
        "```text",
        *[line.rstrip() for line in found["run"]["output"].strip().splitlines()],
        "```",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--work", default=None, help="where the wheels and the root file system go for the build (default: /tmp)"
    )
    parser.add_argument("--keep", action="store_true", help="keep both images")
    parser.add_argument("--json", default=None, help="also write what was found as JSON to this file")
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    command = command_line("container_build.py", argv)
    try:
        tools = check_tools()
    except Unavailable as exc:
        print(f"container_build: cannot build here: {exc}", file=sys.stderr)
        return 2
    with bench_lock() as taker, tempfile.TemporaryDirectory(prefix="ddpbench-container-", dir=args.work) as work:
        start, started = time.monotonic(), utc_now()
        try:
            found = build_and_check(work, args.keep)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:  # a step that failed: its command and output's tail
            print(f"container_build: {exc}", file=sys.stderr)
            return 1
    found.update(
        project_git(),
        command=command,
        lock=taker,
        tools=tools,
        started=started,
        ended=utc_now(),
        minutes=(time.monotonic() - start) / 60,
        cores=usable_cores(),
        cpu_model=cpu_model(),
        kernel=f"{platform.system()} {platform.release()}",
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(found, handle, indent=1)
    text = page(found)
    print(text)
    write_page(args, text)
    return 0 if found["torch_unchanged"] and found["run"]["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
