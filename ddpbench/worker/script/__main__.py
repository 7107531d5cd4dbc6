"""One rank of `ddpbench run --script`: `python -m ddpbench.worker.script --spec-json JSON`.

torchrun starts this module once per rank in place of the script. It installs the observer's
hooks, then runs the script as `__main__` with its own arguments, unmodified: the script does
init_process_group, DDP and its loop itself, and ddpbench measures from the step boundaries. What
the script raises reaches torchrun's error file with the script's own traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

from torch.distributed.elastic.multiprocessing.errors import record as record_errors_for_torchrun

from ddpbench.config.spec import RunSpec
from ddpbench.host.cpu_denied import CpuCounters, name_this_rank
from ddpbench.host.own_tree import check_own_tree
from ddpbench.worker.heartbeat import HEARTBEAT_ENV, Heartbeat
from ddpbench.worker.script.ending import end_of_script
from ddpbench.worker.script.observer import NotDDPTraining, Observer, ScriptNotMeasurable, StopScript
from ddpbench.worker.script.session import Session
from ddpbench.worker.teardown import exit_now


@record_errors_for_torchrun
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec-json", required=True, help="the RunSpec as JSON (written by ddpbench run)")
    spec = RunSpec.from_dict(json.loads(parser.parse_args(argv).spec_json))
    script = spec.script
    rank = int(os.environ.get("RANK", 0))
    name_this_rank(rank)
    beat = Heartbeat(os.environ.get(HEARTBEAT_ENV), rank, stall_after_s=spec.pg_timeout_s / 2)
    observer = Observer(spec.pg_timeout_s)
    # Built here, on the thread that runs the script: the kernel's counters it reads are this thread's.
    session = Session(spec, observer, beat, CpuCounters())
    observer.on_step_end = session.step_ended
    observer.install()
    # The script sees what it would see run plainly: its path as argv[0], its folder on sys.path.
    sys.argv = [script.path, *script.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script.path)))
    stopped = False
    try:
        runpy.run_path(script.path, run_name="__main__")
    except StopScript:
        stopped = True
    except NotDDPTraining as exc:
        raise ScriptNotMeasurable(str(exc)) from None
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise
    finally:
        observer.uninstall()
    check_own_tree()  # one commit of the user's repository: its code, not the checkout's
    return end_of_script(spec, observer, session, stopped)


if __name__ == "__main__":
    # Past finalization: see worker/teardown.py (a failure raises out of main and exits as usual).
    exit_now(main())
