"""Exports of a sweep's records to other tools' formats. No torch.

pytest-benchmark: its saved-run JSON (machine_info, commit_info, benchmarks with stats and the raw
iteration times as data), so `pytest-benchmark compare` and its histograms work on ddpbench
results. The statistics come from pytest-benchmark's own Stats class, so they mean what they mean there.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from ddpbench.analysis import registry
from ddpbench.records.store import read_records, write_atomic

FORMATS = ("pytest-benchmark",)


def machine_info(record) -> dict:
    """pytest-benchmark's machine_info, from the measuring machine as its record describes it
    (not from the machine that happens to export)."""
    env = record.env
    return {
        "node": env.hostname,
        "processor": env.cpu_model,
        "machine": env.machine,
        "python_implementation": env.python_implementation,
        "python_version": env.python,
        "release": env.release,
        "system": env.system,
        "cpu": {"brand_raw": env.cpu_model, "count": env.cpu_cores},
        "gpu": {"count": env.gpu_count, "names": env.gpu_names},
        "torch": env.torch,
        "cuda": env.cuda,
        "nccl": env.nccl,
    }


def pytest_benchmark_json(sweep_dir: str) -> dict:
    from pytest_benchmark import __version__ as pytest_benchmark_version
    from pytest_benchmark.stats import Stats

    records = [record for _, record in read_records(sweep_dir)[0] if record.status == "ok"]
    if not records:
        raise ValueError(f"{sweep_dir!r} holds no successful run records to export")
    benchmarks = []
    for record in sorted(records, key=lambda r: r.run_id):
        spec, metrics = record.spec, record.metrics
        stats = Stats()
        for seconds in registry.record_iteration_times_s(record):
            stats.update(float(seconds))
        entry = stats.as_dict()
        entry["data"] = list(stats.data)
        entry["iterations"] = 1
        param = f"{spec.strategy}-n{spec.world_size}"
        benchmarks.append(
            {
                "group": spec.workload,
                "name": f"{spec.workload}[{param}]",
                "fullname": f"ddpbench::{spec.workload}[{param}]",
                "params": {"strategy": spec.strategy, "world_size": spec.world_size},
                "param": param,
                "extra_info": {
                    "run_id": record.run_id,
                    "world_size": spec.world_size,
                    "strategy": spec.strategy,
                    "batch_size_per_device": spec.batch_size,
                    "precision": spec.precision,
                    "device": spec.device,
                    "throughput_unit": f"{metrics.sample_unit}/s",
                    "measure": "iteration time: the slowest rank's step time, in seconds",
                    # Every registered metric, by the name the runs frame and the scaling table use.
                    **{metric.name: metric.read(record) for metric in registry.METRICS},
                },
                "options": {
                    "timer": "cuda events" if spec.device == "cuda" else "perf_counter",
                    "min_rounds": metrics.timed_steps,
                    "max_time": None,
                    "min_time": None,
                    "warmup": spec.warmup,
                    "disable_gc": False,
                },
                "stats": entry,
            }
        )
    newest = max(records, key=lambda r: r.ended_at or "")
    return {
        "machine_info": machine_info(newest),
        "commit_info": {"id": newest.env.git_sha, "dirty": newest.env.git_dirty, "project": "ddpbench"},
        "benchmarks": benchmarks,
        "datetime": newest.ended_at or datetime.now(timezone.utc).isoformat(),
        "version": pytest_benchmark_version,
    }


def export(sweep_dir: str, output: str, fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    write_atomic(output, json.dumps(pytest_benchmark_json(sweep_dir), indent=1) + "\n")
    return output
