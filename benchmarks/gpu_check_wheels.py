"""The wheels `make gpu-check-one` carries to a lent GPU machine that cannot download: ddpbench's own
dependencies that its one-GPU checks import, for that machine's Python, fetched here where pip works
(`make gpu-check-wheels`) into an ignored folder that travels with the working tree.

On the GPU machine only the missing ones are installed, each wheel unpacked into a folder of the run's
own that goes first on the import path (a wheel is a zip of the package; no pip needed there): what
the image already has, its numpy above all, is left as it is. Standard library only: this runs before
anything else can be imported.

    python benchmarks/gpu_check_wheels.py --download [--python-version 3.12] [--machine x86_64]
    python benchmarks/gpu_check_wheels.py --status
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import zipfile

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDER = os.path.join(PROJECT, ".gpu-check-wheels")
"""Ignored by git (.gitignore): wheels are never committed, they are fetched when needed."""
MANIFEST = "wheels.json"
PACKAGES = {
    "numpy": "numpy",
    "pandas": "pandas",
    "python-dateutil": "dateutil",
    "tzdata": "tzdata",
    "tqdm": "tqdm",
    "msgspec": "msgspec",
    "isal": "isal",
    "nvidia-ml-py": "pynvml",
}
"""Distribution -> the module it installs: what the one-GPU checks import beside torch (runs, traces,
explain, the bundle, NVML's readings) and pandas' own dependencies. The report's (matplotlib, seaborn,
scipy, jinja2) are left out: gpu-check-one makes no report, and they would not fit what a lent
machine's working tree may carry."""
CARRY_LIMIT_BYTES = 64 * 2**20
"""What the device tool carries beside the working tree, all of it together."""


def wheel_tags(filename: str) -> tuple[str, str, str, str]:
    """(distribution, python tag, abi tag, platform tag) of a wheel's file name."""
    parts = filename[: -len(".whl")].split("-")
    return parts[0], parts[-3], parts[-2], parts[-1]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def download(folder: str, python_version: str, machine: str) -> dict:
    """pip download of PACKAGES and their dependencies for that Python and machine, at the versions
    constraints.txt pins; the manifest written beside them. SystemExit where they would not fit."""
    os.makedirs(folder, exist_ok=True)
    for old in os.listdir(folder):
        if old.endswith(".whl"):
            os.remove(os.path.join(folder, old))
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in (17, 24, 27, 28, 34)]
    platforms += [f"manylinux2014_{machine}", f"linux_{machine}"]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "-d", folder]
    command += ["-c", os.path.join(PROJECT, "constraints.txt"), "--python-version", python_version]
    command += ["--implementation", "cp", *(arg for name in platforms for arg in ("--platform", name))]
    subprocess.run([*command, *PACKAGES], check=True)
    wheels = sorted(name for name in os.listdir(folder) if name.endswith(".whl"))
    size = sum(os.path.getsize(os.path.join(folder, name)) for name in wheels)
    if size > CARRY_LIMIT_BYTES:
        raise SystemExit(
            f"the wheels take {size / 2**20:.1f} MiB, more than the {CARRY_LIMIT_BYTES / 2**20:.0f} MiB a lent "
            "machine's working tree may carry"
        )
    manifest = {"python": python_version, "machine": machine, "bytes": size, "wheels": wheels}
    with open(os.path.join(folder, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    return manifest


def read_manifest(folder: str = FOLDER) -> dict | None:
    try:
        with open(os.path.join(folder, MANIFEST), encoding="utf-8") as handle:
            return json.load(handle)
    except OSError:
        return None


def status(folder: str = FOLDER) -> str:
    """One line: what the folder holds, for the dry run."""
    manifest = read_manifest(folder)
    if manifest is None:
        return f"wheels: none in {folder} (make gpu-check-wheels fetches them where pip works)"
    return (
        f"wheels: {len(manifest['wheels'])} for Python {manifest['python']} on {manifest['machine']}, "
        f"{manifest['bytes'] / 2**20:.1f} MiB, in {folder}"
    )


def missing() -> list[str]:
    """The PACKAGES this interpreter cannot import."""
    return [dist for dist, module in PACKAGES.items() if importlib.util.find_spec(module) is None]


def fits_here(filename: str) -> bool:
    _, python_tag, _, platform_tag = wheel_tags(filename)
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    python_ok = any(tag in ("py3", here) for tag in python_tag.split("."))
    return python_ok and (platform_tag == "any" or platform.machine() in platform_tag)


def install_missing(site: str, folder: str = FOLDER) -> dict:
    """Unpack the wheel of every missing package into `site`, put `site` first on this process's and
    its children's import path. RuntimeError, in one line, naming what cannot be brought."""
    needed = missing()
    found = {"present": [dist for dist in PACKAGES if dist not in needed], "installed": [], "site": site}
    if not needed:
        return found
    carried = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    wheels = {normalise(wheel_tags(name)[0]): name for name in carried if name.endswith(".whl")}
    unfit = [dist for dist in needed if normalise(dist) in wheels and not fits_here(wheels[normalise(dist)])]
    absent = [dist for dist in needed if normalise(dist) not in wheels]
    if absent or unfit:
        manifest = read_manifest(folder) or {}
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        other = f"the carried wheels are for Python {manifest.get('python')} on {manifest.get('machine')}; "
        raise RuntimeError(
            f"this python ({sys.executable}, {here}, {platform.machine()}) lacks {', '.join(needed)}; "
            + (f"no wheel carried for {', '.join(absent)}; " if absent else "")
            + (other if unfit else "")
            + f"fetch them where pip works: make gpu-check-wheels WHEELS_PYTHON={here} "
            f"WHEELS_MACHINE={platform.machine()}, and carry {os.path.relpath(folder, PROJECT)}"
        )
    os.makedirs(site, exist_ok=True)
    for dist in needed:
        with zipfile.ZipFile(os.path.join(folder, wheels[normalise(dist)])) as wheel:
            wheel.extractall(site)
        found["installed"].append(dist)
    sys.path.insert(0, site)
    importlib.invalidate_caches()
    os.environ["PYTHONPATH"] = os.pathsep.join([site] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--download", action="store_true", help="fetch the wheels into .gpu-check-wheels/")
    parser.add_argument("--status", action="store_true", help="say what .gpu-check-wheels/ holds")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    parser.add_argument("--machine", default="x86_64", help="the GPU machine's architecture (default x86_64)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d{1,2}", args.python_version):
        parser.error(f"--python-version takes a CPython release such as 3.12; got {args.python_version!r}")
    if args.machine not in ("x86_64", "aarch64"):
        parser.error(f"--machine takes x86_64 or aarch64; got {args.machine!r}")
    if args.download:
        download(FOLDER, args.python_version, args.machine)
    print(status())
    return 0


if __name__ == "__main__":
    sys.exit(main())
