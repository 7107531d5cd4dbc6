"""Where a rank ran (`ddpbench.host.placement`): the scheduler's node name, the node rank, the CPU set
and the GPU's identity. Without a GPU, the NVML path runs against a fake `pynvml` module that answers
as nvidia-ml-py does (handles by "GPU-" UUIDs, bytes from older bindings, NVMLError where a board has
no serial); the worker's use of it is the same call with torch's UUID."""

from __future__ import annotations

import os
import sys
import types

import msgspec
import pytest

from ddpbench.host import placement
from ddpbench.records.schema import RankResult

UUID = "5f2b6a3e-1c1d-7a0b-93a2-4d1e0f1a2b3c"


class NVMLError(Exception):
    pass


def fake_nvml(serial=b"1652021012345", bus_id=b"00000000:41:00.0", init_fails=False, known=(f"GPU-{UUID}",)):
    """A `pynvml` module with the calls `gpu_identity` makes; it records what it was asked."""
    module = types.ModuleType("pynvml")
    module.asked = []
    module.shut_down = False

    def init():
        if init_fails:
            raise NVMLError("NVML Shared Library Not Found")

    def handle(uuid):
        module.asked.append(uuid)
        if uuid not in known:
            raise NVMLError("Not Found")
        return ("handle", uuid)

    def get_serial(handle):
        if isinstance(serial, Exception):
            raise serial
        return serial

    def shutdown():
        module.shut_down = True

    module.nvmlInit = init
    module.nvmlShutdown = shutdown
    module.nvmlDeviceGetHandleByUUID = handle
    module.nvmlDeviceGetSerial = get_serial
    module.nvmlDeviceGetPciInfo = lambda handle: types.SimpleNamespace(busId=bus_id)
    return module


def test_the_gpu_is_named_by_its_uuid_serial_and_pci_bus_id_through_nvml(monkeypatch):
    nvml = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    found = placement.gpu_identity(UUID)
    assert found == {"device_uuid": UUID, "device_serial": "1652021012345", "device_pci_bus_id": "00000000:41:00.0"}
    # torch's bare UUID is asked for with NVML's prefix, and NVML is shut down again.
    assert nvml.asked == [f"GPU-{UUID}"] and nvml.shut_down
    # Newer bindings give text; a MIG slice's UUID keeps its own prefix.
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml("1652", "0000:41:00.0", known=("MIG-abc",)))
    assert placement.gpu_identity("MIG-abc")["device_serial"] == "1652"


def test_what_nvml_cannot_say_stays_unknown_and_the_uuid_stands(monkeypatch):
    # A consumer board has no serial (NVML_ERROR_NOT_SUPPORTED): the bus id is still read.
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(serial=NVMLError("Not Supported")))
    assert placement.gpu_identity(UUID) == {
        "device_uuid": UUID,
        "device_serial": None,
        "device_pci_bus_id": "00000000:41:00.0",
    }
    unknown = {"device_uuid": UUID, "device_serial": None, "device_pci_bus_id": None}
    # No driver, a UUID NVML does not know, nvidia-ml-py not installed: the UUID alone.
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(init_fails=True))
    assert placement.gpu_identity(UUID) == unknown
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(known=()))
    assert placement.gpu_identity(UUID) == unknown
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert placement.gpu_identity(UUID) == unknown
    # A CPU rank has no device to name.
    assert placement.gpu_identity(None) == {"device_uuid": None, "device_serial": None, "device_pci_bus_id": None}


def test_the_machine_is_named_as_its_scheduler_names_it():
    # The Kubernetes node (the downward API's spec.nodeName) before the SLURM node; else none.
    assert placement.node_name({"DDPBENCH_NODE_NAME": "gpu-node-7", "SLURMD_NODENAME": "x"}) == "gpu-node-7"
    assert placement.node_name({"SLURMD_NODENAME": "node2"}) == "node2"
    assert placement.node_name({"DDPBENCH_NODE_NAME": " "}) is None and placement.node_name({}) is None
    assert placement.node_rank({"GROUP_RANK": "1"}) == 1 and placement.node_rank({}) is None


def test_cpu_sets_are_listed_as_the_kernel_lists_them():
    assert placement.cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert placement.cpu_list([5]) == "5" and placement.cpu_list([]) == ""
    assert placement.cpu_set() == placement.cpu_list(os.sched_getaffinity(0))


def test_a_rank_records_where_it_ran_and_an_older_record_reads_as_not_recorded(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    found = placement.rank_placement(UUID, {"GROUP_RANK": "1", "SLURMD_NODENAME": "node2"})
    rank = msgspec.convert({"rank": 3, "hostname": "h", **found}, RankResult)
    assert (rank.node_name, rank.node_rank, rank.device_uuid, rank.device_pci_bus_id) == (
        "node2",
        1,
        UUID,
        "00000000:41:00.0",
    )
    old = msgspec.convert({"rank": 0, "hostname": "h"}, RankResult)
    assert old.node_rank is None and old.cpu_set is None and old.device_uuid is None


@pytest.mark.parametrize("field", ["node_name", "node_rank", "cpu_set", "device_uuid", "device_serial"])
def test_the_published_schema_has_the_placement_fields(field):
    from ddpbench.records.schema import json_schema

    assert field in json_schema()["$defs"]["RankResult"]["properties"]
