"""Exports of a sweep's records to other tools' formats. No torch.

pytest-benchmark: its saved-run JSON (machine_info, commit_info, benchmarks with stats and the raw
iteration times as data), so `pytest-benchmark compare` and its histograms work on ddpbench
results. The statistics come from pytest-benchmark's own Stats class, so they mean what they mean there.
"""

from __future__ import annotations

import json
import platform
from datetime import datetime, timezone

from ddpbench.gate.compare import iteration_times
from ddpbench.analysis.frames import read_records

FORMATS = ("pytest-benchmark",)


def pytest_benchmark_json(sweep_dir: str) -> dict:
    from pytest_benchmark import __version__ as pytest_benchmark_version
    from pytest_benchmark.stats import Stats

    records = [r for r in read_records(sweep_dir)[0] if r["status"] == "ok"]
    if not records:
        raise ValueError(f"{sweep_dir!r} holds no successful run records to export")
    env = records[0].get("env", {})
    benchmarks = []
    for record in sorted(records, key=lambda r: r["run_id"]):
        spec, metrics = record["spec"], record["metrics"]
        stats = Stats()
        for seconds in iteration_times(record):
            stats.update(float(seconds))
        entry = stats.as_dict()
        entry["data"] = list(stats.data)
        entry["iterations"] = 1
        param = f"{spec['strategy']}-n{spec['world_size']}"
        benchmarks.append({
            "group": spec["workload"],
            "name": f"{spec['workload']}[{param}]",
            "fullname": f"ddpbench::{spec['workload']}[{param}]",
            "params": {"strategy": spec["strategy"], "world_size": spec["world_size"]},
            "param": param,
            "extra_info": {
                "run_id": record["run_id"], "world_size": spec["world_size"], "strategy": spec["strategy"],
                "batch_size_per_device": spec["batch_size"], "precision": spec["precision"], "device": spec["device"],
                "throughput": metrics["throughput_units_per_s"], "throughput_unit": f"{metrics['sample_unit']}/s",
                "measure": "iteration time: the slowest rank's step time, in seconds",
            },
            "options": {"timer": "cuda events" if spec["device"] == "cuda" else "perf_counter",
                        "min_rounds": metrics["timed_steps"], "max_time": None, "min_time": None, "warmup": spec["warmup"],
                        "disable_gc": False},
            "stats": entry,
        })
    return {
        "machine_info": {
            "node": env.get("hostname"), "processor": env.get("cpu_model"), "machine": platform.machine(),
            "python_implementation": platform.python_implementation(), "python_version": env.get("python"),
            "release": platform.release(), "system": platform.system(),
            "cpu": {"brand_raw": env.get("cpu_model"), "count": env.get("cpu_cores")},
            "gpu": {"count": env.get("gpu_count"), "names": env.get("gpu_names")},
            "torch": env.get("torch"), "cuda": env.get("cuda"), "nccl": env.get("nccl"),
        },
        "commit_info": {"id": env.get("git_sha"), "dirty": env.get("git_dirty"), "project": "ddpbench"},
        "benchmarks": benchmarks,
        "datetime": max(r.get("ended_at") or "" for r in records) or datetime.now(timezone.utc).isoformat(),
        "version": pytest_benchmark_version,
    }


def export(sweep_dir: str, output: str, fmt: str) -> str:
    from ddpbench.records.store import write_atomic

    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    write_atomic(output, json.dumps(pytest_benchmark_json(sweep_dir), indent=1) + "\n")
    return output
