"""Run records on disk: the one writer and the one loader. No torch.

Layout: `<out_dir>/runs/<run_id>.json`, written to a temporary file and renamed, so a reader
never sees half a file. Records of schema 1 (untyped) are converted when they are loaded; records
of a newer schema, or files that are not records, are refused with the file named.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
from datetime import datetime, timezone
from typing import Any

import msgspec

from ddpbench.config.spec import RunSpec
from ddpbench.records.schema import SCHEMA_VERSION, Environment, Record, Status

_ENCODER = msgspec.json.Encoder()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def record_path(out_dir: str, run_id: str) -> str:
    return os.path.join(out_dir, "runs", f"{run_id}.json")


def record_paths(folder: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, "runs", "*.json")))


def default_file_mode() -> int:
    """What open() would give a new file: mkstemp's private 0600 would hide results from colleagues."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: str, text: str | bytes) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_path, default_file_mode())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def new_record(spec: RunSpec, status: Status, env: dict[str, Any] | None = None) -> Record:
    """The skeleton every record shares, whether the run finished or not."""
    return Record(run_id=spec.run_id, status=status, spec=spec,
                  env=msgspec.convert(env or {}, Environment), ended_at=utc_now())


def encode_record(record: Record) -> bytes:
    """Indented, keys sorted: records are read by people (and diffed) as well as by programs."""
    return json.dumps(msgspec.to_builtins(record), indent=1, sort_keys=True).encode("utf-8") + b"\n"


def write_record(record: Record, out_dir: str) -> str:
    """The one writer. The record is checked against its types first (a part built as a dict
    somewhere, or a wrong type, fails here rather than in a reader later)."""
    try:
        checked = msgspec.json.decode(_ENCODER.encode(record), type=Record)
    except (msgspec.ValidationError, TypeError) as exc:
        raise ValueError(f"run {getattr(record, 'run_id', '?')}: the record does not fit its schema: {exc}") from None
    path = record_path(out_dir, checked.run_id)
    write_atomic(path, encode_record(checked))
    return path


class UnreadableRecord(ValueError):
    """A file that is not a record this ddpbench can read; the message names the file."""


def load_record(path: str) -> Record:
    """The one loader: any schema this ddpbench knows, converted to the current types."""
    try:
        with open(path, "rb") as handle:
            raw = json.loads(handle.read())
    except OSError as exc:
        raise UnreadableRecord(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UnreadableRecord(f"{path}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise UnreadableRecord(f"{path}: not a run record (a JSON {type(raw).__name__})")
    version = raw.get("schema_version")
    if version == 1:
        raw = from_schema_1(raw)
    elif version != SCHEMA_VERSION:
        raise UnreadableRecord(f"{path}: schema_version {version!r}, this ddpbench reads 1 and {SCHEMA_VERSION}")
    try:
        return msgspec.convert(raw, Record)
    except msgspec.ValidationError as exc:
        raise UnreadableRecord(f"{path}: not a valid run record: {exc}") from None


def read_records(folder: str) -> tuple[list[tuple[str, Record]], list[tuple[str, str]]]:
    """All records of a sweep folder (or of a `ddpbench run --out` folder) as (path, record), plus
    (path, reason) for each file that could not be read: one bad file never hides the others."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder!r} is not a folder")
    records, unreadable = [], []
    for path in record_paths(folder):
        try:
            records.append((path, load_record(path)))
        except UnreadableRecord as exc:
            unreadable.append((path, str(exc).removeprefix(f"{path}: ")))
    return records, unreadable


def from_schema_1(raw: dict) -> dict:
    """Schema 1 -> 2: checks move their details under `details`; empty metrics become None."""
    converted = dict(raw, schema_version=SCHEMA_VERSION)
    converted["checks"] = {
        name: {"ok": check.get("ok"), "reason": check.get("reason"),
               "details": {k: v for k, v in check.items() if k not in ("ok", "reason")}}
        for name, check in (raw.get("checks") or {}).items()
    }
    converted["metrics"] = raw.get("metrics") or None
    return converted
