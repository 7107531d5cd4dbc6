"""One prepared check of every GPU path, within a budget sized to the node (--budget-s fixes it).

    python benchmarks/gpu_check.py [--out DIR] [--budget-s S] [--only name,name] [--dry-run]
    make gpu-check USE_PYTHON=/path/to/python GPU_CHECK_ARGS='...'   # the interpreter that has torch

It uses the interpreter it is started with and adds this project by path (nothing is installed
or downloaded), runs each check in its own processes with its own time limit, keeps going after a
check fails, and writes `gpu_check.json` (every check with pass/fail, its figures, its seconds and
its reserve) and `gpu_check.txt` (one line per check) into the output folder, rewritten after every
check so a check that is killed loses nothing already measured. Exit code 0 when every check that
applies to the node ran and passed, 1 when one failed, 3 when none failed but one did not run (out
of budget, ended by the budget, or pytest missing): the last line names those
(benchmarks/gpu_check_plan.py). `--dry-run` prints the plan, each check's reserve on one GPU and
on 2 or more and where that figure comes from, and starts nothing.

Checks, in order: preflight (device, driver, NCCL, bf16, packages, refusal of more GPUs than
there are), an event-clock and matrix-product probe, resnet50 bf16 under local / ddp / dp, gpt2
fp16 with fp16 gradient compression, DDP on two GPUs (the one check that compares ranks; not
applicable, and said so, on one GPU), `trace analyze` of a DDP run's NCCL traces (2 ranks where
there are 2 GPUs), its gradient timeline and `ddpbench project`, gpt2 under fsdp2 with --compile
default and under DDP with compiled autograd, vit_b_16 bf16 with DataLoader workers, a `sweep
--gpus 1` with its table and report, and tests/test_cuda.py. Throughput and MFU are checked against
plausibility ranges, not only printed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
import time
from datetime import datetime

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT)

from gpu_check_cuda_tests import run_cuda_tests  # noqa: E402  (this folder: sys.path[0] as a script)
from gpu_check_nccl import ablation_problems, expected_steps, judge_nccl_job  # noqa: E402
from gpu_check_plan import Ledger, chosen, describe_plan, options_problem, run_plan  # noqa: E402
from gpu_check_probe import PROBE_CODE, judge_probe  # noqa: E402
from gpu_check_processes import CheckFailed, CheckSkipped, OutOfBudget, last_json, tail  # noqa: E402
from gpu_check_reserves import CUDA_TESTS, build_plan  # noqa: E402
from gpu_check_runs import GPT2, GPT2_DDP_TWO_GPUS, GPT2_FP16, write_command  # noqa: E402

from ddpbench.analysis.peaks import device_peak  # noqa: E402  (no torch: safe before the checks)

# Packages the harness imports. msgspec is needed to analyse traces (every profiled run does);
# isal only makes reading them faster.
PACKAGES = (
    "torch",
    "torchvision",
    "numpy",
    "pandas",
    "tqdm",
    "msgspec",
    "isal",
    "matplotlib",
    "seaborn",
    "scipy",
    "pytest",
)
REQUIRED = ("torch", "torchvision", "numpy", "pandas", "tqdm", "msgspec")

# MFU a healthy eager-PyTorch run lands in on one recent GPU at the batch used here. Below the
# range something is throttled or broken (a host sync per kernel, fp32 by mistake, the wrong
# device); above it FLOPs or time are miscounted (100 % of the published peak is impossible).
MFU_RANGE = {"resnet50": (0.01, 0.60), "gpt2": (0.03, 0.80), "vit_b_16": (0.02, 0.80), "mlp": (0.002, 0.90)}
# An 8192^3 bf16 matrix product should reach a large part of the published dense peak; the range
# is wide on purpose (clocks, power caps), and the probe records the figure it measured.
# DDP and DataParallel on one GPU do the same work as no wrapper.
ONE_GPU_AGREEMENT = 0.10

RESNET = "--workload resnet50 --size full --precision bf16 --batch-size 64 --steps 30 --warmup 11".split()
# The fp16 and two-GPU gpt2 runs are the ones tests/test_cuda.py needs too (gpu_check_runs.py): made
# once, read by the CUDA tests. The compile checks take the two-GPU run's options on up to 2 GPUs.
GPT2_BF16 = [*GPT2, "--precision", "bf16"]
VIT_WORKERS = (
    "--workload vit_b_16 --size full --precision bf16 --batch-size 64 --steps 25 --num-workers 4 --strategy ddp"
).split()


def mfu_text(metrics: dict) -> str:
    return "unknown" if metrics.get("mfu") is None else f"{100 * metrics['mfu']:.1f} %"


class Checker(Ledger):
    """The checks themselves; the budget and the summary files are the Ledger's."""

    def __init__(self, out_dir: str, budget_s: float | None, clock=time.monotonic):
        super().__init__(out_dir, budget_s, clock)
        self.summary["project"] = PROJECT
        self.records: dict[str, dict] = {}
        self.device_name: str | None = None

    def ddpbench(self, *args: str, timeout_s: float) -> tuple[int, str]:
        return self.run_process([sys.executable, "-m", "ddpbench", *args], timeout_s)

    def python_json(self, code: str, timeout_s: float) -> dict:
        """Run `code` in a fresh interpreter; its last stdout line is JSON."""
        return last_json(*self.run_process([sys.executable, "-c", code], timeout_s))

    # --- checks --------------------------------------------------------------------------
    def preflight(self, figures: dict) -> str:
        packages = {}
        for name in PACKAGES:
            if importlib.util.find_spec(name) is None:
                packages[name] = None
                continue
            try:
                packages[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                packages[name] = "present"
        figures["packages"] = packages
        facts = self.python_json(
            "import json, os; from ddpbench.worker.environment import torch_facts;"
            "from ddpbench.host.facts import gpu_host_facts, captured_env;"
            "import torch; f = {**torch_facts(), **gpu_host_facts()};"
            "f['numerics_env'] = {k: v for k, v in captured_env(os.environ).items() if k.startswith('NVIDIA_')};"
            "f['cuda_available'] = torch.cuda.is_available(); print(json.dumps(f, default=str))",
            120,
        )
        figures.update(
            {
                key: facts.get(key)
                for key in (
                    "torch",
                    "cuda",
                    "cudnn",
                    "nccl",
                    "gpu_count",
                    "gpu_names",
                    "gpu_capabilities",
                    "gpu_memory_bytes",
                    "bf16_supported",
                    "driver_version",
                    "mig_mode",
                    "matmul_allow_tf32",
                    "cudnn_allow_tf32",
                    "cudnn_benchmark",
                    "cuda_available",
                    "numerics_env",
                )
            }
        )
        figures["gpu_topology"] = facts.get("gpu_topology")
        self.summary["device"] = {
            key: figures.get(key)
            for key in (
                "gpu_names",
                "gpu_count",
                "driver_version",
                "cuda",
                "nccl",
                "torch",
                "bf16_supported",
                "mig_mode",
            )
        }
        if not facts.get("cuda_available") or not facts.get("gpu_count"):
            raise CheckFailed("torch sees no CUDA GPU")
        self.device_name = facts["gpu_names"][0]
        peak = device_peak(self.device_name)
        figures["published_peak"] = (
            None if peak is None else {"matched": peak.label, "tflops": peak.tflops, "source": peak.source}
        )
        problems = [
            f"missing required package {name} (see README 'GPU check')"
            for name in REQUIRED
            if packages.get(name) is None
        ]
        if not facts.get("nccl"):
            problems.append("no NCCL version reported")
        if not facts.get("bf16_supported"):
            problems.append("bf16 not supported natively")
        too_many = str(facts["gpu_count"] + 1)
        code, output = self.ddpbench("run", "--workload", "mlp", "--device", "cuda", "--nproc", too_many, timeout_s=120)
        figures["refusal_run"] = tail(output, 2)
        if code != 2 or f"this machine has {facts['gpu_count']}" not in output:
            problems.append(f"run --nproc {too_many} was not refused with exit code 2 (got {code})")
        code, output = self.ddpbench("sweep", "--gpus", too_many, timeout_s=120)
        figures["refusal_sweep"] = tail(output, 2)
        if code != 2:
            problems.append(f"sweep --gpus {too_many} was not refused with exit code 2 (got {code})")
        if problems:
            raise CheckFailed("; ".join(problems))
        override = (facts.get("numerics_env") or {}).get("NVIDIA_TF32_OVERRIDE")
        return (
            f"{self.device_name} x{facts['gpu_count']}, driver {facts.get('driver_version')}, CUDA "
            f"{facts.get('cuda')}, NCCL {facts.get('nccl')}, torch {facts.get('torch')}, bf16 native, "
            f"peak {'unknown' if peak is None else peak.label}"
            + (f", NVIDIA_TF32_OVERRIDE={override}" if override is not None else "")
        )

    def probe(self, figures: dict) -> str:
        found = self.python_json(PROBE_CODE, 180)
        figures.update(found)
        return judge_probe(found, self.device_name, figures)

    def one_run(self, key: str, args: list[str], figures: dict, timeout_s: float = 240) -> dict:
        """`ddpbench run` on the GPU; the record is checked for status, checks, finite loss, MFU. Its
        options are kept beside it (the CUDA tests read the runs they share with gpu-check)."""
        out = os.path.join(self.out_dir, "runs", key)
        write_command(out, args)
        # ddpbench's own run timeout ends the ranks first, so that the record says so; within what is
        # left of the budget, which then ended the run rather than a hang.
        budget_bound = self.left_s() < timeout_s
        run_timeout = max(30, int(min(timeout_s, self.left_s()) - 30))
        code, output = self.ddpbench(
            "run",
            "--device",
            "cuda",
            "--run-id",
            key,
            "--out",
            out,
            "--run-timeout",
            str(run_timeout),
            *args,
            timeout_s=timeout_s,
        )
        path = os.path.join(out, "runs", f"{key}.json")
        if not os.path.exists(path):
            raise CheckFailed(f"no record (exit code {code}): {tail(output)}")
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        self.records[key] = record
        if (
            budget_bound
            and record["status"] == "timeout"
            and "run timeout" in (record.get("error") or {}).get("message", "")
        ):
            raise OutOfBudget(f"ended by the budget at its {run_timeout} s run timeout")
        metrics = record.get("metrics") or {}
        figures.update(
            {
                "record": path,
                "status": record["status"],
                "exit_code": code,
                "throughput_units_per_s": metrics.get("throughput_units_per_s"),
                "unit": metrics.get("sample_unit"),
                "samples_per_s_per_device": metrics.get("throughput_samples_per_s_per_device"),
                "iteration_p50_s": (metrics.get("iteration_time_s") or {}).get("p50"),
                "mfu": metrics.get("mfu"),
                "mfu_basis": metrics.get("mfu_basis"),
                "flops_per_sample": metrics.get("flops_per_sample"),
                "peak_memory_bytes": [r.get("peak_memory_bytes") for r in record.get("ranks", [])],
                "peak_memory_reserved_bytes": [r.get("peak_memory_reserved_bytes") for r in record.get("ranks", [])],
                "device_memory_used_bytes": [r.get("device_memory_used_bytes") for r in record.get("ranks", [])],
                "host_sync": record.get("host_sync"),
                "error": record.get("error"),
            }
        )
        failed = [name for name, check in (record.get("checks") or {}).items() if check.get("ok") is False]
        if record["status"] != "ok" or code != 0 or failed:
            raise CheckFailed(
                f"status {record['status']}, exit code {code}, failed checks {failed}: "
                f"{(record.get('error') or {}).get('message', tail(output))}"
            )
        if not math.isfinite(metrics.get("final_loss", float("nan"))):
            raise CheckFailed(f"final loss {metrics.get('final_loss')} is not finite")
        self.plausible(record["spec"]["workload"], metrics, figures)
        return record

    def plausible(self, workload: str, metrics: dict, figures: dict) -> None:
        """MFU inside its range; the throughput range follows from it and the published peak."""
        low, high = MFU_RANGE[workload]
        basis = metrics.get("mfu_basis") or {}
        if metrics.get("mfu") is None:
            figures["plausibility"] = f"not checked: {basis.get('reason', 'no MFU')}"
            if not metrics.get("throughput_samples_per_s", 0) > 0:
                raise CheckFailed("throughput is not positive")
            return
        per_sample = metrics["flops_per_sample"]
        lowest = low * basis["peak_flops_per_s"] / per_sample
        highest = high * basis["peak_flops_per_s"] / per_sample
        figures["plausibility"] = {"mfu_range": [low, high], "samples_per_s_per_device_range": [lowest, highest]}
        if not low <= metrics["mfu"] <= high:
            raise CheckFailed(
                f"MFU {100 * metrics['mfu']:.1f} % outside the plausible {100 * low:.0f}-"
                f"{100 * high:.0f} % ({metrics['throughput_samples_per_s_per_device']:.1f} samples/s "
                f"per device; plausible {lowest:.0f}-{highest:.0f})"
            )

    def resnet(self, strategy: str):
        def check(figures: dict) -> str:
            extra = [] if strategy == "ddp" else ["--no-profile"]
            record = self.one_run(f"resnet50-{strategy}", [*RESNET, "--strategy", strategy, *extra], figures)
            metrics = record["metrics"]
            message = f"{metrics['throughput_units_per_s']:,.0f} images/s, MFU {mfu_text(metrics)}"
            local = self.records.get("resnet50-local")
            if strategy != "local" and local and local["status"] == "ok":
                ratio = metrics["throughput_samples_per_s"] / local["metrics"]["throughput_samples_per_s"]
                figures["throughput_over_local"] = ratio
                message += f", {ratio:.3f} x local"
                if abs(ratio - 1) > ONE_GPU_AGREEMENT:
                    raise CheckFailed(
                        f"{strategy} on one GPU runs at {ratio:.3f} x local (allowed within "
                        f"{100 * ONE_GPU_AGREEMENT:.0f} %)"
                    )
            if strategy == "ddp":
                logging = record["host_sync"]["ddp_runtime_logging"]
                if logging["timed_steps_host_synchronised"]:
                    raise CheckFailed(logging["how"])
            return message

        return check

    def communication_run(self) -> tuple[str, dict]:
        """The DDP run whose traces and timeline the communication checks read: with 2 or more GPUs the
        two-rank gpt2 run (one rank's all-reduce launches no NCCL kernel), on one GPU resnet50's."""
        key = "gpt2-ddp-2gpu" if self.gpu_count >= 2 else "resnet50-ddp"
        record = self.records.get(key)
        if not record:
            raise CheckFailed(f"the {key} run made no record (see its check)")
        return key, record

    def contention_projection(self, figures: dict) -> str:
        """The DDP run's gradient timeline on the GPU (CUDA events), its in-process ablation's rounds,
        its contention probe where it has more than one rank (on one GPU there is nothing to contend
        with, and no probe), and `ddpbench project` from that run to 8 GPUs on a preset."""
        key, record = self.communication_run()
        if not record.get("timeline"):
            raise CheckFailed(f"the {key} run has no gradient timeline")
        ranks = record["spec"]["world_size"]
        figures.update(run=key, ladder=record["timeline"].get("ladder"))
        problems = ablation_problems(record)
        probe = record["timeline"]["by_rank"][0].get("contention")
        figures["probe"] = probe
        if ranks > 1:
            for name in ("comm_alone_s", "backward_alone_s", "backward_with_comm_s", "comm_with_backward_s"):
                values = (probe or {}).get(name) or []
                if len(values) != 5 or not all(value > 0 for value in values):
                    problems.append(f"{name}: {values}")
        elif probe is not None:
            problems.append("a one-rank run has a contention probe")
        code, output = self.ddpbench(
            "project", self.record_path(key), "--world", "8", "--network", "h200-nvswitch", timeout_s=60
        )
        figures["project"] = tail(output, 12)
        # One rank has no contention probe (nothing to contend with): the projection must say it
        # assumed none; with more ranks it must use the probe it has.
        said = "not measured (no probe" in output
        if code != 0 or said != (ranks == 1):
            expected = "no probe, assumed none" if ranks == 1 else "the measured contention probe"
            problems.append(f"project exited {code}, expected {expected}: {tail(output)}")
        if problems:
            raise CheckFailed("; ".join(problems))
        return f"{key}: {record['timeline']['ladder']['blocks']} ablation rounds on {ranks} rank(s); " + tail(output, 3)

    def record_path(self, key: str) -> str:
        return os.path.join(self.out_dir, "runs", key, "runs", f"{key}.json")

    def trace_analyze(self, figures: dict) -> str:
        """`trace analyze` of the DDP run's own traces, every rank's: on 2 or more GPUs a 2-rank run's,
        which must hold NCCL kernels, each linked to its launch; on one GPU resnet50's one rank, whose
        all-reduce launches no kernel: its launches linked and its steps whole, NCCL not shown."""
        key, record = self.communication_run()
        paths = ((record.get("overlap") or {}).get("trace") or {}).get("paths") or []
        if len(paths) != record["spec"]["world_size"]:
            raise CheckFailed(f"the {key} run left {len(paths)} traces for {record['spec']['world_size']} ranks")
        code, output = self.ddpbench("trace", "analyze", "--json", *paths, timeout_s=120)
        if code != 0:
            raise CheckFailed(f"exit code {code}: {tail(output)}")
        ranks = json.loads(output[output.index("{") :])["ranks"]
        keys = ("rank", "kind", "backend", "steps_analysed", "compute_us", "comm_us", "overlap_pct", "kernels")
        figures.update(run=key, ranks=[{name: rank.get(name) for name in keys} for rank in ranks])
        code, hta_output = self.ddpbench("trace", "analyze", "--mode", "hta", paths[0], timeout_s=120)
        figures["hta_mode"] = tail(hta_output, 3)
        if code != 0:
            raise CheckFailed(f"--mode hta exit code {code}: {tail(hta_output)}")
        steps = expected_steps(record)
        if len(ranks) >= 2:
            return judge_nccl_job(ranks, steps)
        (rank,) = ranks
        problems = []
        if (rank["kind"], rank["backend"]) != ("gpu", "nccl"):
            problems.append(f"analysed as {rank['kind']} / {rank['backend']}, not gpu / nccl")
        if rank["steps_analysed"] != steps:
            problems.append(f"{rank['steps_analysed']} whole steps analysed, expected {steps}")
        if not rank["compute_us"] > 0:
            problems.append("no compute time")
        if (rank.get("kernels") or {}).get("without_launch"):
            problems.append(f"{rank['kernels']['without_launch']} kernels without a launch event")
        if problems:
            raise CheckFailed("; ".join(problems))
        return (
            f"one rank, gpu/nccl, {steps} steps, {rank['kernels']['total']} kernels all linked to their launches, "
            f"compute {rank['compute_us'] / 1000:.1f} ms (a one-rank all-reduce launches no NCCL kernel: NCCL's "
            "kernels are read where there are 2 GPUs)"
        )

    def gpt2_fp16(self, figures: dict) -> str:
        record = self.one_run("gpt2-fp16", GPT2_FP16, figures)
        metrics = record["metrics"]
        notes = record["host_sync"]["host_reads_per_step"]
        averaged = record["checks"]["gradients_averaged"]
        error = averaged["details"].get("max_relative_error")
        gradients = (
            f"gradients averaged within {error:.1e}"
            if error is not None
            else f"gradients not checked: {averaged['reason']}"
        )  # one GPU, or a diverged fp16 run
        return (
            f"{metrics['throughput_units_per_s']:,.0f} tokens/s, MFU {mfu_text(metrics)}, {gradients}"
            f"{', GradScaler host read noted' if notes else ''}"
        )

    def ddp_two_gpus(self, figures: dict) -> str:
        """DDP over NCCL across two GPUs: the only check here that compares ranks. On one GPU the
        averaging and replica checks have a single rank and are recorded as not checked."""
        figures["gpu_count"] = self.gpu_count  # the plan runs it only with 2 or more
        record = self.one_run("gpt2-ddp-2gpu", GPT2_DDP_TWO_GPUS, figures)
        checks = record["checks"]
        undecided = [
            name
            for name in ("gradients_averaged", "replicas_in_sync", "shards_disjoint")
            if checks[name]["ok"] is not True
        ]
        if undecided:
            raise CheckFailed(f"with 2 ranks these checks were not decided: {undecided}")
        error = checks["gradients_averaged"]["details"]["max_relative_error"]
        return (
            f"2 ranks over NCCL: gradients averaged within {error:.1e}, replicas in sync, "
            f"{record['metrics']['throughput_units_per_s']:,.0f} tokens/s"
        )

    def compiled_and_sharded(self, strategy: str, compile_mode: str, size: str = "full", timeout_s: float = 480):
        """FSDP2 and compiled DDP over NCCL on the GPUs there are (one is enough to run them; with
        two the gradient check compares ranks): the record's compile figures and memory per rank."""

        def check(figures: dict) -> str:
            gpus = min(2, self.gpu_count or 1)
            key = f"gpt2-{size}-{strategy}-{compile_mode}"
            gpt2 = [size if arg == "full" else arg for arg in GPT2_BF16]
            args = [*gpt2, "--strategy", strategy, "--compile", compile_mode, "--nproc", str(gpus), "--no-profile"]
            record = self.one_run(key, args, figures, timeout_s=timeout_s)
            stats = record.get("compile") or {}
            if compile_mode != "off" and not stats.get("graphs"):
                raise CheckFailed(f"--compile {compile_mode} compiled no graph: {stats}")
            failed = [name for name, found in record["checks"].items() if found["ok"] is False]
            if failed:
                raise CheckFailed(f"checks failed: {failed}")
            gradients = record["checks"].get("gradients_averaged") or {}
            # fsdp2 compares its gradient with a plain copy's, on one GPU too: undecided is a failure.
            # DDP's check compares ranks, which one GPU cannot: the line says so instead of passing it.
            if strategy == "fsdp2" and gradients.get("ok") is not True:
                raise CheckFailed(f"fsdp2's gradient check was not decided: {gradients}")
            checked = {True: "gradients match", None: f"gradients not checked ({gradients.get('reason')})"}
            state = max(rank.get("model_state_bytes") or 0 for rank in record["ranks"])
            peak = max(rank.get("peak_memory_bytes") or 0 for rank in record["ranks"])
            reserved = max(rank.get("peak_memory_reserved_bytes") or 0 for rank in record["ranks"])
            used = max(max(rank.get("device_memory_used_bytes") or [0]) for rank in record["ranks"])
            return (
                f"{gpus} GPU(s), {checked[gradients.get('ok')]}: "
                f"{record['metrics']['throughput_units_per_s']:,.0f} tokens/s, compile "
                f"{stats.get('compile_s', 0):.1f} s ({stats.get('graphs')} graphs, {stats.get('graph_breaks')} "
                f"breaks), model state {state / 2**30:.2f} GiB, peak {peak / 2**30:.2f} GiB allocated, "
                f"{reserved / 2**30:.2f} GiB reserved, {used / 2**30:.2f} GiB used on the device per rank"
            )

        return check

    def vit_workers(self, figures: dict) -> str:
        record = self.one_run("vit-workers", VIT_WORKERS, figures)
        metrics = record["metrics"]
        return f"{metrics['throughput_units_per_s']:,.0f} images/s with 4 loader workers, MFU {mfu_text(metrics)}"

    def sweep(self, figures: dict) -> str:
        sweeps = os.path.join(self.out_dir, "sweeps")
        code, output = self.ddpbench(
            "sweep",
            "--gpus",
            "1",
            "--repeat",
            "1",
            "--workloads",
            "mlp",
            "--steps",
            "24",
            "--warmup",
            "11",
            "--out",
            sweeps,
            "--sweep-id",
            "gpu-check",
            "--run-timeout",
            "150",
            timeout_s=420,
        )
        folder = os.path.join(sweeps, "gpu-check")
        figures["output_tail"] = tail(output, 12)
        runs = sorted(os.listdir(os.path.join(folder, "runs"))) if os.path.isdir(os.path.join(folder, "runs")) else []
        statuses = {}
        for name in runs:
            with open(os.path.join(folder, "runs", name), encoding="utf-8") as handle:
                statuses[name[:-5]] = json.load(handle)["status"]
        figures["runs"] = statuses
        report = os.path.join(self.out_dir, "reports", "gpu-check", "index.html")
        problems = []
        if code != 0:
            problems.append(f"sweep exit code {code}")
        if sorted(statuses) != ["mlp-ddp-n1", "mlp-dp-n1", "mlp-local-n1"] or set(statuses.values()) != {"ok"}:
            problems.append(f"runs {statuses}")
        if not os.path.exists(os.path.join(folder, "scaling.csv")):
            problems.append("no scaling.csv")
        if not os.path.exists(report):
            problems.append("no HTML report")
        table_code, table = self.ddpbench("table", folder, timeout_s=120)
        figures["table"] = table.strip().splitlines()[-8:]
        if table_code != 0:
            problems.append(f"table exit code {table_code}")
        # One GPU: DDP x1 against local can only lose DDP overhead and data loading (no communication,
        # no other rank); both must be measured on the GPU's clock, from the in-process ablation's
        # steps (CUDA events), with their intervals.
        explained = os.path.join(self.out_dir, "explain.json")
        explain_code, explain_text = self.ddpbench("explain", folder, "--json-file", explained, timeout_s=120)
        figures["explain"] = explain_text.strip().splitlines()[:10]
        causes = {}
        if explain_code != 0 or not os.path.exists(explained):
            problems.append(f"explain exit code {explain_code}")
        else:
            with open(explained, encoding="utf-8") as handle:
                causes = json.load(handle)["configurations"][0]["causes"]
            figures["causes"] = causes
            unmeasured = [name for name in ("ddp_overhead", "data") if causes[name]["seconds"] is None]
            if unmeasured:
                problems.append(f"explain did not measure {unmeasured} on the GPU")
            elif causes["ddp_overhead"]["seconds"].get("low") is None:
                problems.append(f"DDP overhead has no interval from the in-process ablation: {causes['ddp_overhead']}")
        if problems:
            raise CheckFailed("; ".join(problems) + f": {tail(output)}")
        shown = ", ".join(
            f"{name} {causes[name]['seconds']['value'] * 1e3:.2f} ms" for name in ("ddp_overhead", "data")
        )
        return (
            f"3 runs ok, scaling.csv, table and report ({report}); DDP x1's causes (DDP overhead and data only, "
            f"one GPU): {shown}"
        )

    def cuda_tests(self, figures: dict) -> str:
        if importlib.util.find_spec("pytest") is None:
            raise CheckSkipped("pytest is not installed for this interpreter (docs/gpu-check.md says how to bring it)")
        # Its own limit: twice its reserve (a hang is a failure); the budget may end it sooner (NOT RUN).
        return run_cuda_tests(self, figures, limit_s=2 * CUDA_TESTS.seconds(max(1, self.gpu_count)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="output folder (default results/gpu-check-<time>)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="total seconds (default: sized to the node, the checks' reserves with headroom); a check "
        "that no longer fits, or that the budget ends, is not run, and the exit code is then 3",
    )
    parser.add_argument("--only", default=None, help="comma-separated check names to run (default: all)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan, each check's reserve and its source; start nothing"
    )
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    problem = options_problem(build_plan(Checker(os.devnull, None)), args.budget_s, only)
    if problem:
        parser.error(problem)
    if args.dry_run:
        plan = chosen(build_plan(Checker(os.devnull, args.budget_s)), only)
        print("\n".join(describe_plan(plan, "make gpu-check", args.budget_s)))
        return 0
    out_dir = os.path.abspath(
        args.out or os.path.join(PROJECT, "results", "gpu-check-" + datetime.now().strftime("%Y%m%dT%H%M%S"))
    )
    os.makedirs(out_dir, exist_ok=True)
    checker = Checker(out_dir, args.budget_s)
    print(f"GPU check -> {out_dir}", flush=True)
    code = run_plan(checker, build_plan(checker), only)
    print(f"{checker.closing_line()}; summary in {out_dir}/gpu_check.txt and gpu_check.json (exit code {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())
