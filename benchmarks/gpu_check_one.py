"""The GPU check for one lent GPU, within 5 minutes, so that a rerun fits beside it in a short loan.

    python benchmarks/gpu_check_one.py [--out DIR] [--budget-s S] [--only name,name] [--dry-run]
    make gpu-check-one [USE_PYTHON=python3] [GPU_CHECK_ARGS='...']

What the machine's image lacks of ddpbench's own dependencies comes from wheels carried with the
working tree (`make gpu-check-wheels` fetches them where pip works; gpu_check_wheels.py), unpacked
beside them and put first on the import path, never over what the image has. Then the paths one GPU
reaches, each a check of `make gpu-check` or one of its own: torch, CUDA and NCCL versions and the peak table's row; the
CUDA-event clock and the matrix product against that row; a profiled resnet50 DDP run and its real
CUDA trace, every kernel linked to its launch; FSDP2 with torch.compile; a one-rank stall over NCCL,
whose Flight Recorder dump must hold the collectives the rank issued; and the bundle, against what
docs/gpu-check.md says it holds. It runs on the first GPU only (CUDA_VISIBLE_DEVICES=0 unless set).

Every line gives the check's measured seconds beside its reserve; `gpu_check.json` keeps both, to
replace the reserves' guesses with measured figures. Exit codes as `make gpu-check`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tarfile
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import gpu_check_wheels  # noqa: E402  (standard library only: it runs before anything else can be imported)
from gpu_check import PROJECT, Checker  # noqa: E402
from gpu_check_bundle import judge_bundle, page_patterns  # noqa: E402
from gpu_check_plan import PlannedCheck, chosen, describe_plan, guess, options_problem, run_plan  # noqa: E402
from gpu_check_processes import CheckFailed, tail  # noqa: E402
from gpu_check_runs import write_command  # noqa: E402

BUDGET_S = 300
"""Five minutes: with the machine's own start, a rerun still fits in a 15-minute loan."""
STALL_RUN = [
    "--workload",
    "mlp",
    "--size",
    "tiny",
    "--strategy",
    "ddp",
    "--nproc",
    "1",
    "--steps",
    "12",
    "--warmup",
    "4",
    "--no-profile",
    # The rank's heartbeat dumps its stacks and Flight Recorder after half the process-group timeout
    # without progress; nothing else ends a one-rank stall (no other rank's collective times out), so the
    # run's own timeout does, after the dump.
    "--pg-timeout",
    "10",
    "--run-timeout",
    "35",
    "--inject-fault",
    "rank=0,kind=hang,step=8",
]
STALL_STEP = 8


def judge_stall(run_folder: str, run_id: str, backend: str, figures: dict) -> str:
    """The stalled run's verdict and its Flight Recorder dump: the run ended as a timeout, its rank's
    dump was written while it stalled, and holds every collective the rank's process group issued (as
    many as its heartbeat counted, numbered from 1), its all-reduces at least one per step before the
    stall, each named by the backend."""
    with open(os.path.join(run_folder, "runs", f"{run_id}.json"), encoding="utf-8") as handle:
        record = json.load(handle)
    logs = os.path.join(run_folder, "logs", run_id)
    with open(os.path.join(logs, "heartbeats", "rank-0.json"), encoding="utf-8") as handle:
        beat = json.load(handle)
    dump_path = os.path.join(logs, "hang-dumps", "flight_recorder_rank_0")
    figures.update(status=record["status"], error=(record.get("error") or {}).get("message"), heartbeat=beat)
    problems = []
    if record["status"] != "timeout":
        problems.append(f"the stalled run's status is {record['status']}, not timeout")
    stalled_stacks = os.path.join(logs, "hang-dumps", "stacks_stalled_rank_0.txt")
    if beat.get("step") != STALL_STEP or not os.path.exists(stalled_stacks):
        problems.append(f"the rank did not stall and dump at step {STALL_STEP}: heartbeat {beat}")
    if not os.path.exists(dump_path):
        raise CheckFailed("; ".join([*problems, f"no Flight Recorder dump at {dump_path}"]))
    with open(dump_path, "rb") as handle:
        entries = [entry for entry in pickle.load(handle).get("entries", []) if not entry.get("is_p2p")]
    numbers = sorted(entry["collective_seq_id"] for entry in entries)
    names = [entry["profiling_name"] for entry in entries]
    all_reduces = sum(name == f"{backend}:all_reduce" for name in names)
    figures.update(collectives=len(entries), all_reduces=all_reduces, names=sorted(set(names)))
    if numbers != list(range(1, (beat.get("collectives") or 0) + 1)):
        problems.append(
            f"the dump holds collectives {numbers[:3]}...{numbers[-3:]}, the rank had issued {beat.get('collectives')}"
        )
    if all_reduces < STALL_STEP:
        problems.append(f"{all_reduces} {backend}:all_reduce in the dump for {STALL_STEP} steps before the stall")
    foreign = sorted({name for name in names if not name.startswith(f"{backend}:")})
    if foreign:
        problems.append(f"collectives not named by {backend}: {foreign}")
    if problems:
        raise CheckFailed("; ".join(problems))
    return (
        f"stalled at step {STALL_STEP}, ended at its run timeout; the Flight Recorder dump holds all "
        f"{len(entries)} collectives the rank issued ({all_reduces} {backend}:all_reduce)"
    )


class OneGpuChecker(Checker):
    """gpu-check's checks, and the ones a lent machine needs beside them."""

    make_target = "gpu-check-one"
    script = "benchmarks/gpu_check_one.py"

    def wheels(self, figures: dict) -> str:
        # Beside the wheels, not in the output folder: the bundle of that folder stays what the page lists.
        site = os.path.join(gpu_check_wheels.FOLDER, f"site-cp{sys.version_info.major}{sys.version_info.minor}")
        try:
            found = gpu_check_wheels.install_missing(site)
        except RuntimeError as exc:
            raise CheckFailed(str(exc)) from None
        figures.update(found)
        if not found["installed"]:
            return f"nothing to bring: the image has {', '.join(found['present'])}"
        code, output = self.run_process([sys.executable, "-c", "import pandas, msgspec, pynvml, tqdm"], 60)
        if code != 0:
            raise CheckFailed(f"brought {', '.join(found['installed'])}, and they do not import: {tail(output)}")
        brought = ", ".join(found["installed"])
        return f"brought {brought} into {found['site']}; the image had {', '.join(found['present'])}"

    def stall(self, figures: dict) -> str:
        out = os.path.join(self.out_dir, "runs", "stall")
        write_command(out, STALL_RUN)
        code, output = self.ddpbench(
            "run", "--device", "cuda", "--run-id", "stall", "--out", out, *STALL_RUN, timeout_s=120
        )
        figures["exit_code"] = code
        if not os.path.exists(os.path.join(out, "runs", "stall.json")):
            raise CheckFailed(f"no record (exit code {code}): {tail(output)}")
        return judge_stall(out, "stall", "nccl", figures)

    def bundle(self, figures: dict) -> str:
        out = self.out_dir + "-bundle.tar.gz"
        code, output = self.ddpbench("bundle", self.out_dir, "--out", out, timeout_s=120)
        if code != 0:
            raise CheckFailed(f"bundle exit code {code}: {tail(output)}")
        with tarfile.open(out) as archive:
            names = [name.split("/", 1)[1] for name in archive.getnames()]
        figures.update(bundle=out, bytes=os.path.getsize(out), files=len(names))
        # What this run's folder must give: its summary, every record it made, the logs, what bundle adds.
        must_hold = ["gpu_check.json", "runs/<check>/runs/<run-id>.json", "bundle/environment.json"]
        said = judge_bundle(names, page_patterns(), must_hold)
        return f"{out}: {os.path.getsize(out) / 2**20:.2f} MiB, {said}"


def build_one_gpu_plan(checker: OneGpuChecker) -> list[PlannedCheck]:
    """No GPU run has timed these yet: every reserve is a guess until this script measures it."""
    return [
        PlannedCheck(
            "bring what the image lacks",
            guess(10, 10, "unpacking about 30 MB of carried wheels, one import in a fresh process"),
            checker.wheels,
        ),
        PlannedCheck(
            "preflight",
            guess(25, 25, "torch's import and CUDA's start in a fresh process, two ddpbench refusals that count GPUs"),
            checker.preflight,
        ),
        PlannedCheck(
            "event clock and matmul probe",
            guess(20, 20, "a fresh process: torch's import and CUDA's start, then about 5 s of products"),
            checker.probe,
        ),
        PlannedCheck(
            "resnet50 bf16 ddp (nccl)",
            guess(
                70,
                70,
                "torchrun and one rank over NCCL: its start, 30 steps, the profiled phase, the in-process "
                "ablation's rounds, the no_sync replay",
            ),
            checker.resnet("ddp"),
        ),
        PlannedCheck(
            "trace analyze (nccl traces)",
            guess(10, 10, "`trace analyze` of one rank's trace in both modes, without torch"),
            checker.trace_analyze,
        ),
        PlannedCheck(
            "gpt2 tiny fsdp2 + compile (nccl)",
            guess(
                100,
                100,
                "Inductor's and Triton's caches start cold: compiling a 2-block gpt2 under FSDP2 for the warm-up "
                "and again for the gradient check (eval mode, fp32, outside autocast), its start and steps",
            ),
            checker.compiled_and_sharded("fsdp2", "default", size="tiny", timeout_s=240),
        ),
        PlannedCheck(
            "one-rank stall over nccl, flight recorder",
            guess(45, 45, "a one-rank run that stalls at its 9th step, dumps after 5 s and ends at its 35 s timeout"),
            checker.stall,
        ),
        PlannedCheck(
            "bundle",
            guess(10, 10, "`ddpbench bundle` of this folder with explain's JSON, without torch"),
            checker.bundle,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="output folder (default results/gpu-check-one-<time>)")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help=f"total seconds (default {BUDGET_S})")
    parser.add_argument("--only", default=None, help="comma-separated check names to run (default: all)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan, each check's reserve and its source; start nothing"
    )
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    problem = options_problem(build_one_gpu_plan(OneGpuChecker(os.devnull, None)), args.budget_s, only)
    if problem:
        parser.error(problem)
    if args.dry_run:
        plan = chosen(build_one_gpu_plan(OneGpuChecker(os.devnull, args.budget_s)), only)
        lines = describe_plan(plan, "make gpu-check-one", args.budget_s, one_gpu_only=True)
        print("\n".join([*lines, gpu_check_wheels.status()]))
        return 0
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")  # one lent GPU: the first, whatever else is there
    out_dir = os.path.abspath(
        args.out or os.path.join(PROJECT, "results", "gpu-check-one-" + datetime.now().strftime("%Y%m%dT%H%M%S"))
    )
    os.makedirs(out_dir, exist_ok=True)
    checker = OneGpuChecker(out_dir, args.budget_s)
    print(f"GPU check, one GPU -> {out_dir} (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']})", flush=True)
    started = time.monotonic()
    code = run_plan(checker, build_one_gpu_plan(checker), only)
    print(
        f"{checker.closing_line()}; {time.monotonic() - started:.0f} s of the {args.budget_s:.0f} s budget; summary in "
        f"{out_dir}/gpu_check.txt and gpu_check.json (exit code {code})"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
