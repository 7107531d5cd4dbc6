"""Peak memory per phase of a run: warm-up, the timed window, the checks.

A peak read once at the end would be the peak of whatever ran hardest, not of training: the
gradient check runs in fp32 after the window, so a bf16 run would report the check's peak. So
every phase starts from a reset and is read at its end.

- GPU: `torch.cuda.reset_peak_memory_stats` / `max_memory_allocated` on every device the
  process drives (DataParallel's replicas live on all of them, not only cuda:0), and beside it
  `max_memory_reserved`: what the caching allocator held from the driver, cached free blocks and
  fragmentation included. Neither counts what lies outside torch's allocator (the CUDA context,
  NCCL's buffers, cuBLAS's workspaces): `device_used` reads the device's used memory from NVML, as
  nvidia-smi shows it, once, at the timed window's end.
- CPU: the process's peak resident set (VmHWM), which Linux resets when 5 is written to
  /proc/self/clear_refs. Where that is refused, the peak since the process started
  (`ru_maxrss`), which cannot be reset, and the kind says so.
"""

from __future__ import annotations

import resource

import torch

from ddpbench.host.load import gpu_memory_used

CUDA_KIND = "cuda_max_memory_allocated"
CPU_RESETTABLE_KIND = "process_peak_rss"
CPU_SINCE_START_KIND = "process_max_rss"


def _clear_cpu_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _cpu_peak_bytes() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class PeakMemory:
    """Peaks of one process's devices, phase by phase."""

    def __init__(self, devices: list[torch.device]):
        self.devices = devices
        self.on_cuda = devices[0].type == "cuda"
        self.by_phase: dict[str, dict] = {}
        self.phase: str | None = None
        self.kind = CUDA_KIND if self.on_cuda else CPU_RESETTABLE_KIND

    def start(self, phase: str) -> None:
        """Reset the peaks; call at a sync point (the previous phase's work must be done)."""
        self.phase = phase
        if self.on_cuda:
            for device in self.devices:
                torch.cuda.reset_peak_memory_stats(device)
        elif not _clear_cpu_peak():
            self.kind = CPU_SINCE_START_KIND

    def end(self) -> dict:
        """Read the peaks of the phase started last: the largest device and each device."""
        reserved = None
        if self.on_cuda:
            by_device = [torch.cuda.max_memory_allocated(device) for device in self.devices]
            reserved = [torch.cuda.max_memory_reserved(device) for device in self.devices]
        else:
            peak = _cpu_peak_bytes() if self.kind == CPU_RESETTABLE_KIND else None
            if peak is None:
                self.kind = CPU_SINCE_START_KIND
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
            by_device = [peak]
        found = {"peak_bytes": max(by_device), "by_device": by_device, "kind": self.kind}
        if reserved is not None:
            found.update(reserved_bytes=max(reserved), reserved_by_device=reserved)
        self.by_phase[self.phase] = found
        return found

    def device_used(self) -> dict:
        """The devices' used memory from NVML now (call at the window's end, outside any timed step):
        `device_memory_used_bytes` per device and, where it could not be read, `device_memory_note`."""
        if not self.on_cuda:
            return {}
        uuids = [str(torch.cuda.get_device_properties(device).uuid) for device in self.devices]
        used, note = gpu_memory_used(uuids)
        return {"device_memory_used_bytes": used, "device_memory_note": note}
