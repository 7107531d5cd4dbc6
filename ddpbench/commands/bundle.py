"""`ddpbench bundle RESULTS_DIR`: one file to send back when a sweep, a run or the GPU check went
wrong: the records, the manifest, the logs (what torchrun and every rank printed, heartbeats, hang
dumps), the GPU check's summary, this machine's environment and `explain`'s JSON, every text with
secrets hidden. No torch; traces stay out unless asked for (they are large, and `trace` reads them
where they are)."""

from __future__ import annotations

import argparse
import io
import json
import os
import tarfile
import time

from ddpbench.commands.arguments import exit_codes
from ddpbench.config.errors import SpecError
from ddpbench.config.secrets import redact_text

TEXT_SUFFIXES = (".json", ".log", ".txt", ".csv", ".out", ".err", ".yaml", ".md", ".xml")
"""Files the bundle redacts and keeps; others (a pickled Flight Recorder dump) go in as they are."""
TRACE_FOLDER = "traces"
"""Folders of this name are left out unless --with-traces, at any depth: a sweep keeps its traces in
`traces/`, a lone run in its own `traces/`, and the GPU check has one of each per check
(`runs/<check>/traces/`, `sweeps/gpu-check/traces/`, the CUDA tests' runs)."""
TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
"""Profiler traces outside such a folder are left out too."""
MAX_FILE_BYTES = 20 * 2**20
"""A file larger than this is cut to its last part: a log's end holds the failure."""


def add_bundle_parser(commands) -> None:
    bundle = commands.add_parser(
        "bundle",
        help="one .tar.gz of a results folder to send back: records, logs, environment, explain",
        description="Gather what someone needs to see why a sweep, a run or the GPU check failed into one "
        "tar.gz: run records, the manifest, logs (torchrun's and every rank's output, heartbeats, hang dumps), "
        "gpu_check.json and .txt, this machine's environment (environment.json) and explain's JSON "
        "(explain.json, or why it could not be made). Secrets are hidden in every text file. Traces stay out "
        "unless --with-traces.",
    )
    bundle.add_argument("results_dir", metavar="RESULTS_DIR", help="a sweep's, run's or GPU check's folder")
    bundle.add_argument("--out", default=None, help="the file to write (default RESULTS_DIR-bundle.tar.gz beside it)")
    bundle.add_argument("--with-traces", action="store_true", help="add the profiler traces too (large)")
    exit_codes(bundle, "0 written")
    bundle.set_defaults(handler=command_bundle)


def environment() -> dict:
    from ddpbench.host.facts import host_facts
    from ddpbench.host.torch_env import installed

    facts = host_facts()  # env_vars: the NCCL_/TORCH_/CUDA_ ... variables, secrets hidden
    facts["packages"] = {
        name: installed(name).version for name in ("torch", "torchvision", "numpy", "pandas", "msgspec", "pytest")
    }
    return facts


def explain_json(results_dir: str) -> dict:
    """explain's answers as `ddpbench explain --json-file` writes them, or why there are none."""
    from ddpbench.commands.explain import sweep_answers

    try:
        from ddpbench.analysis.explain_json import answers_json

        answers, problems, _, _ = sweep_answers(results_dir, with_traces=False)
        return {**answers_json(answers, {}), "not_explained": problems}
    except Exception as exc:  # a failed sweep may have nothing to explain: say why, keep the rest
        return {"error": f"{type(exc).__name__}: {exc}"}


def _add_text(archive: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(time.time())
    archive.addfile(info, io.BytesIO(data))


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - MAX_FILE_BYTES))
        return handle.read()


def bundle(results_dir: str, out: str, with_traces: bool = False) -> list[str]:
    """Write the bundle; the names it holds."""
    top = os.path.basename(os.path.normpath(results_dir))
    names = []
    with tarfile.open(out, "w:gz") as archive:
        for folder, dirs, files in os.walk(results_dir):
            # Never follow a link out of the folder, nor take the bundle itself in.
            dirs[:] = sorted(
                d for d in dirs if not os.path.islink(os.path.join(folder, d)) and (with_traces or d != TRACE_FOLDER)
            )
            for file in sorted(files):
                path = os.path.join(folder, file)
                if os.path.islink(path) or os.path.abspath(path) == os.path.abspath(out):
                    continue
                if not with_traces and file.endswith(TRACE_SUFFIXES):
                    continue
                name = f"{top}/{os.path.relpath(path, results_dir)}"
                data = _read(path)
                if file.endswith(TEXT_SUFFIXES):
                    _add_text(archive, name, redact_text(data.decode("utf-8", "replace")))
                else:
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime = len(data), int(os.path.getmtime(path))
                    archive.addfile(info, io.BytesIO(data))
                names.append(name)
        for name, found in (("environment.json", environment()), ("explain.json", explain_json(results_dir))):
            _add_text(archive, f"{top}/bundle/{name}", redact_text(json.dumps(found, indent=1, default=str)))
            names.append(f"{top}/bundle/{name}")
    return names


def command_bundle(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.results_dir):
        raise SpecError(f"{args.results_dir!r} is not a folder: give a sweep's, run's or GPU check's results folder")
    out = args.out or os.path.normpath(args.results_dir) + "-bundle.tar.gz"
    if os.path.isdir(out):
        raise SpecError(f"--out {out!r} is a folder: give a file name ending in .tar.gz")
    names = bundle(args.results_dir, out, args.with_traces)
    records = sum(1 for name in names if "/runs/" in name and name.endswith(".json"))
    logs = sum(1 for name in names if "/logs/" in name)
    size = os.path.getsize(out)
    print(
        f"bundle: {out} ({size / 2**20:.1f} MiB, {len(names)} files: {records} records, {logs} log files, "
        "environment.json, explain.json)"
    )
    kept = "traces included" if args.with_traces else "traces left out (--with-traces adds them)"
    print(f"secrets hidden in every text file (variables, options, URL passwords, access keys); {kept}")
    return 0
