"""Step times of large runs kept beside their record, in a numpy .npy file. No torch.

A 1,024-rank run with 5,000 timed steps holds 5 million step times. As JSON that is about 100 MB
that takes seconds to parse into 5 million Python floats; as a float64 matrix (ranks x steps) in
a .npy file it is 40 MB that loads in tens of milliseconds. Why .npy and not Parquet: numpy is
already a dependency (pyarrow is not), the matrix is one dense array of one type (nothing for a
columnar format to add), and `np.load` reads it without pickle.

The record names the file, its sha256 and its shape (`Record.step_times_sidecar`); the file's name
carries the start of its checksum, so rewriting a record never changes the file an older copy of
the JSON points at: a reader sees either the old pair or the new one, never a mix. A missing file,
a checksum or shape that does not match, is an unreadable record with the file named.

The loader hands each rank a `StepTimes`: a read-only sequence over its row of the matrix, so
readers that iterate, index, slice or take `len()` work unchanged, `np.asarray()` costs no copy,
and `step_time_matrix(record)` gives the whole matrix without building a single Python float.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
from collections.abc import Sequence

import numpy as np

SIDECAR_MIN_VALUES = 50_000
"""Runs with fewer step times (ranks x steps) keep them inline: about 1 MB of JSON, read in
milliseconds, and a record people can read with any JSON tool."""
DTYPE = "<f8"
"""Step times stay float64: the round trip through the file is exact."""


class SidecarError(ValueError):
    """A sidecar that cannot be trusted; the message names the file."""


class StepTimes(Sequence):
    """One rank's step times as a read-only view of row `index` of the sidecar's matrix. It reads
    like the list the JSON would have held (iteration gives Python floats; `==` compares with
    lists), and numpy takes it without a copy."""

    __slots__ = ("matrix", "index")

    def __init__(self, matrix: np.ndarray, index: int):
        self.matrix = matrix
        self.index = index

    @property
    def _row(self) -> np.ndarray:
        return self.matrix[self.index]

    def __len__(self) -> int:
        return self.matrix.shape[1]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._row[index].tolist()
        return float(self._row[index])

    def __iter__(self):
        return iter(self._row.tolist())

    def __array__(self, dtype=None, copy=None):
        return self._row if dtype is None else self._row.astype(dtype, copy=False)

    def __eq__(self, other) -> bool:
        if isinstance(other, StepTimes | list | tuple | np.ndarray):
            return len(self) == len(other) and bool(np.array_equal(self._row, np.asarray(other, dtype=float)))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"StepTimes({len(self)} steps of rank row {self.index}, from the record's sidecar)"

    def tolist(self) -> list[float]:
        return self._row.tolist()


def encode_step_times(value):
    """msgspec `enc_hook`: a loaded record's StepTimes are written back as the list they stand for."""
    if isinstance(value, StepTimes):
        return value.tolist()
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def step_time_matrix(ranks) -> np.ndarray | None:
    """Step times as a (ranks x steps) float64 matrix, in the order given; None when ranks timed
    different numbers of steps. For a record loaded with a sidecar this is the loaded matrix
    itself: no copy, no Python floats."""
    rows = [rank.step_times_s for rank in ranks]
    if rows and all(isinstance(row, StepTimes) for row in rows):
        matrix = rows[0].matrix
        if (
            matrix.shape[0] == len(rows)
            and all(row.matrix is matrix for row in rows)
            and all(row.index == i for i, row in enumerate(rows))
        ):
            return matrix
    if len({len(row) for row in rows}) > 1:
        return None
    if not rows:
        return np.zeros((0, 0))
    return np.asarray(rows, dtype=float).reshape(len(rows), -1)


def sidecar_file_name(run_id: str, digest: str) -> str:
    return f"{run_id}.step_times.{digest[:16]}.npy"


def npy_bytes(matrix: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(matrix, dtype=DTYPE), allow_pickle=False)
    return buffer.getvalue()


def read_matrix(folder: str, file_name: str, sha256: str, shape: list[int]) -> np.ndarray:
    """The checked matrix of a sidecar: its bytes hashed once, then parsed from memory (no second
    read that could see a different file)."""
    if os.path.basename(file_name) != file_name:
        raise SidecarError(f"step-time sidecar {file_name!r} must be a file name beside the record, not a path")
    path = os.path.join(folder, file_name)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise SidecarError(f"step-time sidecar {path}: cannot read: {exc.strerror or exc}") from None
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise SidecarError(
            f"step-time sidecar {path}: sha256 {found[:16]}... does not match the record's "
            f"{sha256[:16]}... (the file was changed or belongs to another record)"
        )
    try:
        matrix = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise SidecarError(f"step-time sidecar {path}: not a numpy .npy array: {exc}") from None
    if list(matrix.shape) != list(shape) or matrix.dtype != np.dtype(DTYPE):
        raise SidecarError(
            f"step-time sidecar {path}: holds {matrix.dtype} {list(matrix.shape)}, the record "
            f"says float64 {list(shape)}"
        )
    return matrix


def stale_sidecars(folder: str, run_id: str, keep: str | None) -> list[str]:
    """Sidecars of this run that its current JSON no longer names (left by an earlier write)."""
    pattern = os.path.join(glob.escape(folder), f"{glob.escape(run_id)}.step_times.*.npy")
    return [path for path in glob.glob(pattern) if os.path.basename(path) != keep]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
