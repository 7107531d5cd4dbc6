"""`ddpbench sbatch`: a whole sweep submitted as one SLURM job, the report written when it ends. No torch."""

from __future__ import annotations

import argparse
import os
import sys
import time

from ddpbench.commands.arguments import exit_codes
from ddpbench.commands.sweep import add_sweep_arguments, sweep_options_from_args
from ddpbench.config.errors import SpecError
from ddpbench.config.ids import check_id
from ddpbench.config.options import host_names


def add_sbatch_parser(commands) -> None:
    sbatch = commands.add_parser(
        "sbatch",
        allow_abbrev=False,  # its options are told apart from the sweep's by name
        help="submit a whole sweep as one SLURM job, its report at the end",
        description="Submit a whole sweep as one SLURM job (the sweep runs with --launcher slurm inside it, one srun "
        "step per run), the report written when it ends. Every option but the job's goes to the sweep as typed.",
    )
    add_sbatch_arguments(sbatch)
    exit_codes(
        sbatch,
        "0 submitted (with --print: the batch script written, nothing submitted)",
        "with --wait, the job's own exit code (the sweep's: 1 a run failed)",
    )
    sbatch.set_defaults(handler=command_sbatch)


# Options of `ddpbench sbatch` that are not the sweep's (how many values each takes): the rest of
# the command line goes to the sweep in the batch script as typed.
SBATCH_ONLY_OPTIONS = {
    "--launcher": 1,
    "--partition": 1,
    "--time": 1,
    "--account": 1,
    "--sbatch-option": 1,
    "--wait": 0,
    "--print": 0,
    "--avoid-hosts": 1,
}


def add_sbatch_arguments(parser: argparse.ArgumentParser) -> None:
    add_sweep_arguments(parser)
    group = parser.add_argument_group("the SLURM job (the other options go to the sweep it runs)")
    group.add_argument("--partition", default=None, help="partition to run in (default: the cluster's default)")
    group.add_argument("--time", default=None, help="time limit, as sbatch takes it (e.g. 2:00:00)")
    group.add_argument("--account", default=None, help="account to charge")
    group.add_argument(
        "--sbatch-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="one more #SBATCH line, e.g. --sbatch-option=--qos=high (repeatable)",
    )
    group.add_argument(
        "--avoid-hosts",
        type=host_names,
        default=(),
        metavar="HOSTS",
        help="keep the job off these nodes, e.g. node-1,node-7 (as ddpbench history hosts names them): #SBATCH "
        "--exclude",
    )
    group.add_argument("--wait", action="store_true", help="wait for the job to end; exit with its exit code")
    group.add_argument("--print", action="store_true", help="write and print the batch script, submit nothing")


def command_sbatch(args: argparse.Namespace) -> int:
    """Submit a whole sweep as one job: whole nodes, one srun step per run, the report at the end."""
    from ddpbench.config.plan import plan_sweep
    from ddpbench.config.secrets import hide_in_batch_script
    from ddpbench.records.store import write_atomic
    from ddpbench.running import slurm

    sweep_argv, skip = [], 0
    for arg in args.argv[1:]:  # the sweep's own options, as typed
        name = arg.split("=", 1)[0]
        if skip or name in SBATCH_ONLY_OPTIONS:
            skip = 0 if skip else SBATCH_ONLY_OPTIONS.get(name, 0) * ("=" not in arg)
            continue
        sweep_argv.append(arg)
    args.launcher = "slurm"
    if args.sweep_id is not None:  # before anything is written: the batch script goes in its folder
        check_id("--sweep-id", args.sweep_id, f"--out ({args.out!r})", nested=True)
    sweep_id = args.sweep_id or f"{time.strftime('%Y%m%d-%H%M%S')}-slurm"
    sweep_argv += [] if args.sweep_id else ["--sweep-id", sweep_id]
    sweep_dir = os.path.abspath(os.path.join(args.out, sweep_id))
    nodes = max(args.nodes or (1,))
    if not args.resume:  # what the job would refuse inside its allocation, refused here already
        if args.device == "cuda" and not args.gpus:
            raise SpecError("a GPU sweep needs --gpus-per-node G: the job must ask SLURM for its GPUs")
        # The node's cores are known inside the allocation; here, as many as the threads asked for.
        cores = (args.nproc or 1) * (args.threads_per_rank or 1)
        plan_sweep(sweep_options_from_args(args, (args.gpus or 0, cores, args.nodes, "a node")), sweep_dir)
    if args.partition and nodes > (total := slurm.check_partition(args.partition)):
        raise SpecError(f"asked for {nodes} nodes; partition {args.partition!r} has {total}")
    options = [
        f"--{name}={slurm.directive_word(value, '--' + name)}"
        for name, value in (("partition", args.partition), ("time", args.time), ("account", args.account))
        if value
    ] + slurm.exclude_options(args.avoid_hosts)
    # A script's secret arguments: the batch script reads them from the job's environment.
    sweep_argv, words, secrets = hide_in_batch_script(sweep_argv)
    script = slurm.sbatch_script(
        sweep_argv, sweep_dir, nodes, args.gpus, options + args.sbatch_option, sys.executable, os.getcwd()
    )
    for placeholder, word in words.items():
        script = script.replace(placeholder, word)
    script_path = os.path.join(sweep_dir, "sbatch.sh")
    write_atomic(script_path, script)
    if args.print:
        print(script, end="")
        if secrets:
            print(
                f"the batch script reads secret arguments from {', '.join(secrets)}: export them before sbatch",
                file=sys.stderr,
            )
        print(f"batch script: {script_path} (submit it with: sbatch {script_path})", file=sys.stderr)
        return 0
    slurm.check_submission(script_path)
    exit_code, answer = slurm.submit(script_path, args.wait, secrets)
    job_id = answer.splitlines()[0].split(";")[0] if answer else "?"
    if exit_code != 0 and not args.wait:
        raise SpecError(f"sbatch refused the job: {answer}")
    print(
        f"job {job_id}: sweep {sweep_dir} (log {os.path.join(sweep_dir, f'slurm-{job_id}.out')}); "
        f"the report is written when the sweep ends"
    )
    return exit_code
