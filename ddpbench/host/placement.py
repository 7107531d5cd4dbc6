"""Where one rank ran: the machine's name as its scheduler knows it, the node rank torchrun gave its
agent, the CPUs it could run on, and its GPU's identity. Read by every rank, recorded in its part of
the record (`RankResult`), and kept by the history (`ddpbench.history.ranks`), which asks across
sweeps whether the same machine or GPU is slow again. No torch: the worker passes the GPU's UUID,
which torch gives.

A machine is named by the scheduler where one ran the rank, since that is the name its exclusion
takes: the Kubernetes node (`spec.nodeName`, put in DDPBENCH_NODE_NAME by the TrainJob manifests'
downward API; a pod's own host name is the pod's, new in every job), else the SLURM node
(SLURMD_NODENAME, which may differ from the host name: several slurmd on one host, or NodeHostname).
Elsewhere the host name is the machine's name and `node_name` stays None.

A GPU is named by its UUID (torch), and where NVML can be read (`nvidia-ml-py`) also by its board
serial number and PCI bus id: a UUID names one GPU for ever, the serial the board an operator pulls
from the machine, the bus id its slot (`nvidia-smi -i 0000:41:00.0`). Where NVML is missing or
fails, those two stay None and the run goes on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from ddpbench.host.load import nvml_handle

NODE_NAME_VARIABLE = "DDPBENCH_NODE_NAME"
"""The Kubernetes node a pod runs on, from the downward API (`ddpbench trainjob` sets it)."""
SLURM_NODE_VARIABLE = "SLURMD_NODENAME"


def node_name(environ: Mapping[str, str] = os.environ) -> str | None:
    """The scheduler's name of the machine this process runs on; None outside a scheduler."""
    for variable in (NODE_NAME_VARIABLE, SLURM_NODE_VARIABLE):
        value = environ.get(variable, "").strip()
        if value:
            return value
    return None


def node_rank(environ: Mapping[str, str] = os.environ) -> int | None:
    """The node rank torchrun's rendezvous gave this rank's agent (GROUP_RANK); None in a process
    torchrun did not start. (The rendezvous orders the agents by their address, so `--node-rank` is
    a request, and this is what it got.)"""
    value = environ.get("GROUP_RANK", "")
    return int(value) if value.isdigit() else None


def cpu_list(cpus: set[int] | list[int]) -> str:
    """CPUs as the kernel lists them (`0-3,8`): short for a 256-core machine."""
    found = sorted(set(cpus))
    ranges, start = [], None
    for index, cpu in enumerate(found):
        if start is None:
            start = cpu
        if index + 1 == len(found) or found[index + 1] != cpu + 1:
            ranges.append(str(start) if start == cpu else f"{start}-{cpu}")
            start = None
    return ",".join(ranges)


def cpu_set() -> str | None:
    """The CPUs this process may run on (its affinity: a cpuset, taskset, a SLURM binding); None off
    Linux."""
    try:
        return cpu_list(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _text(value) -> str | None:
    if isinstance(value, bytes):  # older bindings return bytes
        value = value.decode("ascii", "replace")
    value = str(value).strip() if value is not None else ""
    return value or None


def gpu_identity(uuid: str | None) -> dict:
    """`device_uuid`, `device_serial` and `device_pci_bus_id` of the GPU with this UUID; the last two
    None where NVML cannot say (not installed, no driver, a board without a serial, a MIG slice)."""
    found = {"device_uuid": uuid, "device_serial": None, "device_pci_bus_id": None}
    if not uuid:
        return found
    try:
        import pynvml
    except ImportError:
        return found
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError, or a library that does not match the bindings
        return found
    try:
        handle = nvml_handle(pynvml, uuid)
        with contextlib.suppress(Exception):  # consumer boards have no serial: NVML_ERROR_NOT_SUPPORTED
            found["device_serial"] = _text(pynvml.nvmlDeviceGetSerial(handle))
        with contextlib.suppress(Exception):
            found["device_pci_bus_id"] = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
    except Exception:  # a UUID NVML does not know (a MIG slice of an old driver): the UUID stands
        pass
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return found


def rank_placement(gpu_uuid: str | None = None, environ: Mapping[str, str] = os.environ) -> dict:
    """This rank's fields of `RankResult` that say where it ran (its host name is read beside them)."""
    return {
        "node_name": node_name(environ),
        "node_rank": node_rank(environ),
        "cpu_set": cpu_set(),
        **gpu_identity(gpu_uuid),
    }
