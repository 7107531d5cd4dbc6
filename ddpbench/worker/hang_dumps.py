"""Evidence of a hang, written by a rank about itself: its Python stacks (every thread) and
PyTorch's Flight Recorder buffer (the collectives it issued, with their call stacks).

Written into the run's log folder, once, by the heartbeat thread when the rank's progress has
stalled, while the main thread is still blocked; `faulthandler` also writes the stacks when
torchrun ends the rank with SIGTERM, for a rank that stalled too briefly to be dumped.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal

from ddpbench.config.channels import HANG_DUMPS_FOLDER as DUMPS_FOLDER  # noqa: F401 (one name, both sides)


def stacks_path(folder: str, rank: int, when: str = "stalled") -> str:
    return os.path.join(folder, f"stacks_{when}_rank_{rank}.txt")


def flight_recorder_path(folder: str, rank: int) -> str:
    # <prefix><rank> with nothing after the rank: the file name torch's analyzer expects.
    return os.path.join(folder, f"flight_recorder_rank_{rank}")


def dump_stacks(path: str) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        faulthandler.dump_traceback(file=handle, all_threads=True)
    return path


def stacks_on_sigterm(path: str):
    """Write every thread's stack when the rank is sent SIGTERM, then let the signal end it as
    before (chain). Returns the open file, which must stay open."""
    handle = open(path, "w", encoding="utf-8")
    faulthandler.register(signal.SIGTERM, file=handle, all_threads=True, chain=True)
    return handle


def stop_stacks_on_sigterm(handle) -> None:
    faulthandler.unregister(signal.SIGTERM)  # before closing: the handler writes to the file's descriptor
    handle.close()


def flight_recorder_bytes(backend: str) -> bytes:
    """This rank's Flight Recorder buffer as torch pickles it (callable from any thread)."""
    from torch._C import _distributed_c10d as c10d

    if backend == "nccl" and hasattr(c10d, "_dump_nccl_trace"):
        return c10d._dump_nccl_trace()
    return c10d._dump_fr_trace()


def name_unnamed_groups(dump: dict) -> dict:
    """gloo's dumps key the default group's pg_config by '' while their entries call the group
    '0' (its uid), and torch's analyzer looks groups up by the entries' uid: copy the config
    under the uids the entries use, so the analyzer can read our dumps (torch itself untouched)."""
    config = dump.get("pg_config") or {}
    if "" in config:
        for uid, desc in {
            tuple(entry["process_group"]) for entry in dump.get("entries", []) if entry.get("process_group")
        }:
            config.setdefault(uid, {**config[""], "name": uid, "desc": desc})
        del config[""]
    return dump


def dump_flight_recorder(path: str, backend: str) -> str:
    dump = name_unnamed_groups(pickle.loads(flight_recorder_bytes(backend)))
    tmp_path = path + ".tmp"
    with open(tmp_path, "wb") as handle:
        pickle.dump(dump, handle)
    os.replace(tmp_path, path)
    return path
