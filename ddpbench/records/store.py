"""Run records on disk: the one writer and the one loader. No torch.

Layout: `<out_dir>/runs/<run_id>.json`, written to a temporary file and renamed, so a reader
never sees half a file. Records of schema 1 (untyped) are converted when they are loaded; records
of a newer schema, or files that are not records, are refused with the file named.

Large runs (at least `SIDECAR_MIN_VALUES` step times) keep their ranks' step times in
`<run_id>.step_times.<sha256 prefix>.npy` beside the JSON (see `ddpbench.records.sidecar`); the
writer decides, the loader fills them back in, and no reader needs to know.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import tempfile
from datetime import datetime, timezone
from typing import Any

import msgspec
import numpy as np

from ddpbench.config.identity import typed_paths
from ddpbench.config.secrets import redact_args, secret_positions
from ddpbench.config.spec import RunSpec
from ddpbench.records import sidecar
from ddpbench.records.schema import SCHEMA_VERSION, Environment, Record, Status, StepTimesSidecar

_ENCODER = msgspec.json.Encoder(enc_hook=sidecar.encode_step_times)
_DECODER = msgspec.json.Decoder(Record)


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
    """The skeleton every record shares, whether the run finished or not. A script's secret
    arguments are hidden: records are committed as baselines."""
    if spec.script is not None and secret_positions(spec.script.args):
        spec = spec.replace(script=dataclasses.replace(spec.script, args=redact_args(spec.script.args)))
    return Record(
        run_id=spec.run_id, status=status, spec=spec, env=msgspec.convert(env or {}, Environment), ended_at=utc_now()
    )


def encode_record(record: Record) -> bytes:
    """Indented, keys sorted: records are read by people (and diffed) as well as by programs."""
    builtins = msgspec.to_builtins(record, enc_hook=sidecar.encode_step_times)
    return json.dumps(builtins, indent=1, sort_keys=True).encode("utf-8") + b"\n"


def write_record(record: Record, out_dir: str, sidecar_min_values: int = sidecar.SIDECAR_MIN_VALUES) -> str:
    """The one writer. The record is checked against its types first (a part built as a dict
    somewhere, or a wrong type, fails here rather than in a reader later). A run with at least
    `sidecar_min_values` step times, the same number on every rank, gets its step times in a
    sidecar file, written (atomically) before the JSON that names it."""
    run_id = getattr(record, "run_id", "?")
    matrix = _large_step_times(record, sidecar_min_values)
    held = [rank.step_times_s for rank in record.ranks] if matrix is not None else []
    try:
        # The step times of a large run are checked as one float matrix, not 5 million times.
        for rank in record.ranks if matrix is not None else []:
            rank.step_times_s = []
        checked = _DECODER.decode(_ENCODER.encode(record))
    except (msgspec.ValidationError, TypeError) as exc:
        raise ValueError(f"run {run_id}: the record does not fit its schema: {exc}") from None
    finally:
        for rank, times in zip(record.ranks, held):
            rank.step_times_s = times
    path = record_path(out_dir, checked.run_id)
    folder = os.path.dirname(path)
    checked.step_times_sidecar = None
    if matrix is not None:
        data = sidecar.npy_bytes(matrix)
        digest = sidecar.digest(data)
        name = sidecar.sidecar_file_name(checked.run_id, digest)
        write_atomic(os.path.join(folder, name), data)
        checked.step_times_sidecar = StepTimesSidecar(file=name, sha256=digest, shape=list(matrix.shape))
    write_atomic(path, encode_record(checked))
    # Only now is an older sidecar of this run unreferenced (a reader of the old JSON is done with it).
    keep = checked.step_times_sidecar.file if checked.step_times_sidecar else None
    for stale in sidecar.stale_sidecars(folder, checked.run_id, keep):
        try:
            os.unlink(stale)
        except OSError:
            pass
    return path


def _large_step_times(record: Record, min_values: int):
    """The ranks' step times as one matrix when they belong in a sidecar; None when they stay
    inline (a small run, ranks that timed different numbers of steps, or parts that are not
    typed yet, which the schema check then names)."""
    try:
        rows = [rank.step_times_s for rank in record.ranks]
    except (AttributeError, TypeError):
        return None
    if not rows or len({len(row) for row in rows}) != 1 or len(rows) * len(rows[0]) < min_values:
        return None
    try:
        matrix = sidecar.step_time_matrix(record.ranks)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"run {getattr(record, 'run_id', '?')}: the record does not fit its schema: "
            f"step times are not numbers: {exc}"
        ) from None
    if not np.isfinite(matrix).all():
        raise ValueError(f"run {record.run_id}: the record does not fit its schema: step times must be finite")
    return matrix


class UnreadableRecord(ValueError):
    """A file that is not a record this ddpbench can read; the message names the file."""


def load_record(path: str) -> Record:
    """The one loader: any schema this ddpbench knows, converted to the current types, with the
    step times of a sidecar filled in."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise UnreadableRecord(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        # The common case in one pass, straight into the types; anything else takes the slow
        # path below, which says what is wrong.
        record = _DECODER.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        record = None
    if record is None or record.schema_version != SCHEMA_VERSION:
        record = _convert(path, data)
    if record.step_times_sidecar is not None:
        _fill_step_times(path, record)
    if typed_paths(record.spec):
        folder = started_in(path, record.spec.out_dir)
        if folder is not None:
            record.spec = record.spec.replace(started_in=folder)
    return record


def started_in(path: str, out_dir: str) -> str | None:
    """The folder a record made before runs kept it was started in, from where the record lies: a
    run wrote `<that folder>/<its out_dir>/runs/<run id>.json`, so a relative out_dir that the
    record's own folder ends with gives it (its workload file's relative path then says which file
    it ran, `config.identity`); None where out_dir is absolute or the records were moved."""
    if not out_dir or os.path.isabs(out_dir):
        return None
    out = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    parts = [part for part in os.path.normpath(out_dir).split(os.sep) if part not in ("", os.curdir)]
    if not parts or os.pardir in parts:
        return None
    folder = out
    for part in reversed(parts):
        if os.path.basename(folder) != part:
            return None
        folder = os.path.dirname(folder)
    return folder


def _fill_step_times(path: str, record: Record) -> None:
    reference = record.step_times_sidecar
    try:
        matrix = sidecar.read_matrix(os.path.dirname(path), reference.file, reference.sha256, reference.shape)
    except sidecar.SidecarError as exc:
        raise UnreadableRecord(f"{path}: {exc}") from None
    if matrix.shape[0] != len(record.ranks) or any(rank.step_times_s for rank in record.ranks):
        raise UnreadableRecord(
            f"{path}: its step-time sidecar has {matrix.shape[0]} rows for {len(record.ranks)} "
            f"ranks, or the ranks hold step times of their own"
        )
    matrix.flags.writeable = False  # shared by every rank's view; nothing may edit it in place
    for index, rank in enumerate(record.ranks):
        rank.step_times_s = sidecar.StepTimes(matrix, index)


def _convert(path: str, data: bytes) -> Record:
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise UnreadableRecord(f"{path}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise UnreadableRecord(f"{path}: not a run record (a JSON {type(raw).__name__})")
    version = raw.get("schema_version")
    if version == 1:
        raw = from_schema_5(from_schema_4(from_schema_3(from_schema_2(from_schema_1(raw)))))
    elif version == 2:
        raw = from_schema_5(from_schema_4(from_schema_3(from_schema_2(raw))))
    elif version == 3:
        raw = from_schema_5(from_schema_4(from_schema_3(raw)))
    elif version == 4:
        raw = from_schema_5(from_schema_4(raw))
    elif version == 5:
        raw = from_schema_5(raw)
    elif version != SCHEMA_VERSION:
        raise UnreadableRecord(
            f"{path}: schema_version {version!r}, this ddpbench reads 1 to {SCHEMA_VERSION}"
            + (": it was written by a newer ddpbench" if isinstance(version, int) and version > SCHEMA_VERSION else "")
        )
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


def from_schema_5(raw: dict) -> dict:
    """Schema 5 -> 6: only optional parts were added (what the kernel counted of each rank's CPU,
    per step and per probe): a schema-5 record reads as one that did not measure them, never as
    one that measured no waiting."""
    return dict(raw, schema_version=6)


def from_schema_4(raw: dict) -> dict:
    """Schema 4 -> 5: ranks' model state by part is new, and `model_state_bytes` now counts DDP's
    gradient buckets (a second copy of the gradients without gradient_as_bucket_view) and FSDP2's
    unsharded buffers. A schema-4 figure of a run that held either left them out: it reads as not
    counted, not as a smaller figure to compare with newer ones."""
    spec = raw.get("spec") or {}
    strategy = spec.get("strategy")
    bucket_view = (spec.get("ddp") or {}).get("gradient_as_bucket_view")
    undercounted = strategy == "fsdp2" or (strategy in ("ddp", "replicate") and not bucket_view)
    if not undercounted or not raw.get("ranks"):
        return dict(raw, schema_version=5)
    return dict(raw, schema_version=5, ranks=[dict(rank, model_state_bytes=None) for rank in raw["ranks"]])


def from_schema_3(raw: dict) -> dict:
    """Schema 3 -> 4: only optional parts were added (compile, model state, the new strategies);
    a record of schema 3 is an eager run of local, ddp or dp and reads as it was."""
    return dict(raw, schema_version=4)


def from_schema_2(raw: dict) -> dict:
    """Schema 2 -> 3: only optional parts were added (the machine's load, the error's kind); a record
    of schema 2 has none of them, and every reader treats their absence as not measured."""
    return dict(raw, schema_version=3)


def from_schema_1(raw: dict) -> dict:
    """Schema 1 -> 2: checks move their details under `details`; empty metrics become None."""
    converted = dict(raw, schema_version=2)
    converted["checks"] = {
        name: {
            "ok": check.get("ok"),
            "reason": check.get("reason"),
            "details": {k: v for k, v in check.items() if k not in ("ok", "reason")},
        }
        for name, check in (raw.get("checks") or {}).items()
    }
    converted["metrics"] = raw.get("metrics") or None
    return converted
