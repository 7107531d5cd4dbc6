"""A run's ranks as the history keeps them: where each ran, what held it back, and on the slowest
rank's row the run's straggler. No torch.

Per (run, rank):
- where it ran: its host (the scheduler's node name where one ran it, else its host name; None:
  "host not recorded", a record from before ranks named their host), node rank, local rank, its
  device (GPU UUID, serial and PCI bus id where recorded) and the CPUs it could run on;
- its CPU denied where the kernel's counters were read (`ddpbench.analysis.cpu_denied`): its training
  thread's waiting for a core as a share of its step, and its causes in a word each: `cpu_quota` (a
  CPU quota throttled it), `waited_for_a_core` (it waited beyond noise), `other_processes` (other
  processes took a part of that waiting beyond noise);
- on the row of the rank the run's straggler analysis chose as the slowest
  (`ddpbench.analysis.straggler.run_straggler`, the one definition every view reads), whether it was
  beyond noise, its lead (the wait for it, seconds per step, with its interval) and phase, and the
  figures `straggler.pooled` needs to pool a configuration's runs again. A run whose straggler could
  not be measured has no such row.

`straggler_of` turns the stored rows back into the run's `Straggler`, so a sweep's culprit is pooled
from stored runs exactly as `explain` pools it from the records.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddpbench.analysis.estimates import Estimate

if TYPE_CHECKING:
    from ddpbench.analysis.straggler import Straggler
    from ddpbench.records.schema import Record

HOST_NOT_RECORDED = "host not recorded"
CAUSE_WORDS = {
    "cpu_quota": "a CPU quota throttled it",
    "waited_for_a_core": "it waited for a core beyond noise",
    "other_processes": "other processes took a part of that waiting beyond noise",
}


@dataclass(frozen=True)
class RankRow:
    """One rank of one run, as stored."""

    rank: int
    world_size: int
    host: str | None = None
    node_rank: int | None = None
    local_rank: int | None = None
    device_uuid: str | None = None
    device_serial: str | None = None
    device_pci_bus_id: str | None = None
    cpu_set: str | None = None
    cpu_denied_share: float | None = None
    """Its training thread's waiting for a core, a fraction of its step; None: not measured."""
    causes: tuple[str, ...] = ()
    slowest: bool = False
    """The rank the run's straggler analysis chose as the slowest (beyond noise or not)."""
    straggler: dict | None = field(default=None, compare=False)
    """On the slowest rank's row: the run's straggler (`straggler_json`)."""

    @property
    def lead_s(self) -> float | None:
        return self.straggler["wait"]["value"] if self.straggler else None

    @property
    def phase(self) -> str | None:
        return self.straggler.get("phase") if self.straggler else None


def host_of(rank) -> str | None:
    """The machine a rank of a record ran on: its scheduler's name for it, else its host name."""
    return rank.node_name or rank.hostname or None


def _estimate_json(estimate: Estimate | None) -> dict | None:
    return None if estimate is None else {**estimate.as_dict(), "se": estimate.se}


def _estimate(found: dict | None) -> Estimate | None:
    if found is None:
        return None
    return Estimate(found["value"], found["low"], found["high"], found["samples"], found["over"], found.get("se"))


def straggler_json(straggler: Straggler) -> dict:
    return {
        "wait": _estimate_json(straggler.wait),
        "named": straggler.named,
        "source": straggler.source,
        "halves_agree": straggler.halves_agree,
        "phase": straggler.phase,
        "leads": {phase: _estimate_json(lead) for phase, lead in (straggler.leads or {}).items()},
    }


def straggler_of(rows: list[RankRow]) -> Straggler:
    """A stored run's straggler, from its rows; not measured (wait None) where none was stored."""
    # Here, not at the top: the store reads and writes rows without the analysis (numpy) loaded.
    from ddpbench.analysis.straggler import Straggler

    slowest = next((row for row in rows if row.slowest and row.straggler), None)
    if slowest is None:
        return Straggler(None, None, "none", why_not="not measured, or not stored")
    found = slowest.straggler
    leads = {phase: _estimate(lead) for phase, lead in (found.get("leads") or {}).items()}
    return Straggler(
        _estimate(found["wait"]),
        slowest.rank,
        found["source"],
        found["halves_agree"],
        found.get("phase"),
        slowest.host,
        leads=leads or None,
    )


def _causes(cpu) -> tuple[str, ...]:
    if cpu is None:
        return ()
    found = [
        name
        for name, holds in (
            ("cpu_quota", cpu.throttled),
            ("waited_for_a_core", cpu.beyond_noise),
            ("other_processes", cpu.harmed_by_others),
        )
        if holds
    ]
    return tuple(found)


def rank_rows(record: Record) -> list[RankRow]:
    """One row per rank of an ok run; the slowest rank's carries the run's straggler."""
    from ddpbench.analysis.cpu_denied import run_cpu
    from ddpbench.analysis.straggler import run_straggler

    ranks = sorted(record.ranks, key=lambda r: r.rank)
    world = len(ranks)
    straggler = run_straggler(record) if world > 1 else None
    measured = straggler is not None and straggler.wait is not None and straggler.rank is not None
    try:
        cpu = run_cpu(record)
    except (ValueError, ZeroDivisionError):  # counters too short to read: not measured
        cpu = None
    cpu_by_rank = {found.rank: found for found in cpu.ranks} if cpu is not None else {}
    rows = []
    for rank in ranks:
        mine = cpu_by_rank.get(rank.rank)
        slowest = measured and rank.rank == straggler.rank
        rows.append(
            RankRow(
                rank=rank.rank,
                world_size=world,
                host=host_of(rank),
                node_rank=rank.node_rank,
                local_rank=rank.local_rank,
                device_uuid=rank.device_uuid,
                device_serial=rank.device_serial,
                device_pci_bus_id=rank.device_pci_bus_id,
                cpu_set=rank.cpu_set,
                cpu_denied_share=mine.share.value if mine is not None else None,
                causes=_causes(mine),
                slowest=slowest,
                straggler=straggler_json(straggler) if slowest else None,
            )
        )
    return rows


COLUMNS = (
    "world_size, rank, host, node_rank, local_rank, device_uuid, device_serial, device_pci_bus_id, cpu_set, "
    "cpu_denied_share, causes, slowest, lead_s, phase, straggler"
)


def as_columns(row: RankRow) -> tuple:
    """The row's values in the order of COLUMNS."""
    return (
        row.world_size,
        row.rank,
        row.host,
        row.node_rank,
        row.local_rank,
        row.device_uuid,
        row.device_serial,
        row.device_pci_bus_id,
        row.cpu_set,
        row.cpu_denied_share,
        json.dumps(list(row.causes)),
        int(row.slowest),
        row.lead_s,
        row.phase,
        json.dumps(row.straggler) if row.straggler is not None else None,
    )


def from_columns(values: tuple) -> RankRow:
    """A row read back in the order of COLUMNS."""
    (world, rank, host, node_rank, local_rank, uuid, serial, bus, cpus, denied, causes, slowest, _, _, found) = values
    return RankRow(
        rank=int(rank),
        world_size=int(world),
        host=host,
        node_rank=node_rank,
        local_rank=local_rank,
        device_uuid=uuid,
        device_serial=serial,
        device_pci_bus_id=bus,
        cpu_set=cpus,
        cpu_denied_share=None if denied is None else float(denied),
        causes=tuple(json.loads(causes)),
        slowest=bool(slowest),
        straggler=json.loads(found) if found else None,
    )
