"""Run records: one self-describing JSON file per run, written atomically. No torch.

Layout: `<out_dir>/runs/<run_id>.json`. See the README for every field.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "timeout", "oom", "skipped")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def record_path(out_dir: str, run_id: str) -> str:
    return os.path.join(out_dir, "runs", f"{run_id}.json")


def default_file_mode() -> int:
    """What open() would give a new file: mkstemp's private 0600 would hide results from colleagues."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str, text: str) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(text)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_path, default_file_mode())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def write_record(record: dict[str, Any], out_dir: str) -> str:
    if record.get("status") not in STATUSES:
        raise ValueError(f"record status must be one of {STATUSES}; got {record.get('status')!r}")
    path = record_path(out_dir, record["run_id"])
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def load_record(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        record = json.load(handle)
    if record.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {record.get('schema_version')!r}, "
                         f"this ddpbench reads {SCHEMA_VERSION}")
    return record


def new_record(spec: dict[str, Any], status: str, env: dict | None = None) -> dict[str, Any]:
    """The skeleton every record shares, whether the run finished or not."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": spec["run_id"],
        "status": status,
        "spec": spec,
        "env": env or {},
        "ranks": [],
        "metrics": {},
        "checks": {},
        "error": None,
        "started_at": None,
        "ended_at": utc_now(),
    }


def failed_checks(record: dict) -> list[str]:
    return [name for name, check in (record.get("checks") or {}).items() if check.get("ok") is False]
