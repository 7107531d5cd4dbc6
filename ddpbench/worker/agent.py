"""torchrun's agent, with ranks forked from a process that has already imported what they need:
`python -m ddpbench.worker.agent <torchrun's options> -m ddpbench.worker --spec-json JSON`.

It reads torchrun's own command line (`torch.distributed.run`'s parser and `config_from_args`), so
the rendezvous, node ranks, restarts, log folders and tee, error files and signal handling are
torchrun's elastic agent's, unchanged. The one difference: torchrun starts each rank as a new Python
that imports torch, the worker and torch._dynamo again (about 3.2 CPU-seconds a rank on the 2-core
development VM, 5 with torchvision), while this agent imports them once and hands the elastic agent a
Python function as its entrypoint, which starts the ranks through multiprocessing with `fork`
(`LaunchConfig.start_method`). docs/measurements/start-up.md measures what that saves. When a rank
fails it also prints the exit of every rank that had failed by then (`report_rank_exits`), which
torchrun's summary of a forked group does not.

Before the fork this process runs no torch operation and makes no CUDA call: it only imports
(`check_fork_safe` refuses to fork after CUDA was initialised). Each rank then sets its own thread
counts (OpenMP read OMP_NUM_THREADS here already; the rank's `torch.set_num_threads` decides), its
own device from LOCAL_RANK and its CUDA context, as under torchrun. A user's own workload file is
imported by each rank after the fork, as under torchrun: its top-level code is the user's.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import signal
import sys
import uuid

# Asked before anything imports torch: whether CUDA is available comes from NVML, without the CUDA
# runtime, so nothing here can initialise CUDA before the ranks are forked.
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "ddpbench.worker.main")
"""Imported before the fork: torch, the worker and what every rank imports on its way to its first
step (an optimizer's constructor imports torch._dynamo)."""


def _leave(code: int) -> int:
    """What `ddpbench.worker.teardown.exit_now` does for a rank of its own, short of exiting: the
    exit handlers (a script's loggers among them) and the output flushed. multiprocessing then ends
    the forked rank with os._exit, without the interpreter's finalization, as exit_now does."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def _as_a_new_python() -> None:
    """The signal handlers a rank of its own starts with. A forked rank inherits the agent's, which
    turn SIGTERM, SIGHUP and SIGQUIT into an exception (torchrun's agent handles them so): in a rank
    that would be written down as the rank's own error, where torchrun ending a hung rank must read
    as the signal it is."""
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run_worker(argv: list[str]) -> int:
    from ddpbench.worker.main import main

    _as_a_new_python()
    return _leave(main(argv))


def run_script(argv: list[str]) -> int:
    from ddpbench.worker.script.__main__ import main

    _as_a_new_python()
    return _leave(main(argv))


ENTRYPOINTS = {"ddpbench.worker": run_worker, "ddpbench.worker.script": run_script}
"""The modules torchrun would run with `-m`, and the function each forked rank calls instead."""


def workload_modules(script_args: list[str]) -> list[str]:
    """The built-in workload's module of the run (`workloads.vision` imports torchvision), from its
    spec; none for a user's file or a script, whose top-level code runs in the ranks."""
    from ddpbench.config.workloads import BUILTIN_WORKLOADS

    try:
        spec = json.loads(script_args[script_args.index("--spec-json") + 1])
    except (ValueError, IndexError):
        return []
    if spec.get("script") or spec.get("workload") not in BUILTIN_WORKLOADS:
        return []
    return [BUILTIN_WORKLOADS[spec["workload"]].partition(":")[0]]


def no_driver_no_gpus() -> None:
    """Where NVIDIA's driver is missing, GPUs are counted as none without asking the CUDA runtime.
    torch asks the runtime once NVML cannot answer (torchrun's LaunchConfig asks whether an accelerator
    is there), and asking it marks every process forked afterwards as unable to use CUDA: a rank whose
    code then asks for a GPU would read "Cannot re-initialize CUDA in forked subprocess" instead of
    the truth, that the machine has no driver."""
    import torch

    count = getattr(torch.cuda, "_device_count_nvml", None)
    if count is not None and not os.path.exists("/proc/driver/nvidia/version") and count() < 0:
        torch.cuda._device_count_nvml = lambda: 0


def forked_ranks_can_use_cuda() -> bool:
    """Whether a process forked from this one could still use CUDA, asked of a child forked to say so
    (torch marks forks after CUDA was asked in ways NVML does not cover)."""
    import torch

    bad = getattr(torch._C, "_cuda_isInBadFork", None)
    if bad is None:
        return True
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the child only answers and leaves, without the interpreter's finalization
        os.write(writer, b"1" if bad() else b"0")
        os._exit(0)
    os.close(writer)
    answer = os.read(reader, 1)
    os.close(reader)
    os.waitpid(child, 0)
    return answer == b"0"


def check_fork_safe() -> None:
    """Refuse to fork ranks from a process that initialised CUDA: a forked rank could not use it."""
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError("ddpbench.worker.agent: CUDA was initialised before the ranks were forked")


def report_rank_exits() -> None:
    """Have the elastic agent's group of forked ranks print the exit of every rank that had failed
    when the agent found the failure.

    torchrun's summary names one failed rank of a forked group: the first that multiprocessing's join
    finds among those already ended. A rank killed by a signal and its peer that then lost the
    connection often end within one of the agent's polls (0.1 s), and the peer, found first, hides
    the signal (seen once in three runs of a rank killed at step 3 on 2 cores). A group of ranks
    started as new processes is summarised with every rank ended by the poll; this gives the forked
    group the same. The ranks are read as the poll starts, before the agent ends the others: a rank
    the agent itself ends (SIGTERM, or SIGKILL 30 s later where the rank would not stop) is not
    printed, so it cannot read as a cause. Where this torch has no such group, nothing changes: the
    summary is read alone."""
    from torch.distributed.elastic.multiprocessing import api

    from ddpbench.config.channels import RANK_EXIT_LINE

    group = getattr(api, "MultiprocessContext", None)
    poll = getattr(group, "_poll", None)
    if poll is None or getattr(poll, "reports_rank_exits", False):
        return

    def poll_and_report(self):
        processes = getattr(getattr(self, "_pc", None), "processes", None) or []
        ended = {local_rank: process.exitcode for local_rank, process in enumerate(processes)}
        result = poll(self)
        failures = getattr(result, "failures", None)
        if failures and not getattr(self, "_ddpbench_exits_reported", False):
            self._ddpbench_exits_reported = True
            # The rank the poll found (it may have ended just after the reading above) is one of them.
            ended.update({local_rank: failure.exitcode for local_rank, failure in failures.items()})
            for local_rank, code in sorted(ended.items()):
                if code:  # None: still running at the poll; 0: a clean exit
                    rank = (self.envs.get(local_rank) or {}).get("RANK", local_rank)
                    print(RANK_EXIT_LINE.format(rank=rank, local_rank=local_rank, code=code), flush=True)
        return result

    poll_and_report.reports_rank_exits = True
    group._poll = poll_and_report


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args, parse_min_max_nnodes

    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.module or args.training_script not in ENTRYPOINTS:
        allowed = " or ".join(f"-m {name}" for name in ENTRYPOINTS)
        raise SystemExit(f"ddpbench.worker.agent starts {allowed}, not {args.training_script!r}")
    script_args = list(args.training_script_args)
    for name in (*PRELOAD, *workload_modules(script_args)):
        importlib.import_module(name)
    no_driver_no_gpus()
    check_fork_safe()
    # As torchrun's own `run()` does: standalone is a c10d rendezvous on a free local port.
    if args.standalone or (
        args.rdzv_backend == "static"
        and not args.rdzv_endpoint
        and args.master_port is None
        and parse_min_max_nnodes(args.nnodes)[1] == 1
    ):
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    if args.master_port is None:
        args.master_port = 29500
    config, _, _ = config_from_args(args)
    config.start_method = "fork"
    if not forked_ranks_can_use_cuda():
        # Asking for the device count marked forks as unable to use CUDA (no NVML to ask instead):
        # each rank is then a new Python again, as under torchrun, and the log says why.
        print("ddpbench.worker.agent: this torch cannot give a forked rank CUDA here; starting ranks with spawn")
        config.start_method = "spawn"
    report_rank_exits()
    elastic_launch(config=config, entrypoint=ENTRYPOINTS[args.training_script])(script_args)
    return 0


if __name__ == "__main__":
    # As torchrun's main: a rank's failure is summarised and its error file copied where asked.
    from torch.distributed.elastic.multiprocessing.errors import record

    sys.exit(record(main)())
