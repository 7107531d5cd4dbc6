"""Naming the hung rank, on saved and constructed evidence (the real runs are in test_faults.py)."""

import faulthandler
import json
import os
import shutil
import threading
import time

from conftest import FIXTURES

from ddpbench.config.channels import RANK_EXIT_LINE
from ddpbench.running import hang_evidence
from ddpbench.running.diagnose import diagnose
from ddpbench.running.heartbeats import find_hang, place
from ddpbench.worker.hang_dumps import name_unnamed_groups

GLOO_DUMPS = os.path.join(FIXTURES, "flight_recorder", "gloo-rank1-hangs")  # real dumps, as torch wrote them


def beat(rank, step, where, collectives, phase="timed", **more):
    return {"rank": rank, "step": step, "where": where, "phase": phase, "collectives": collectives, **more}


def test_the_rank_behind_in_collectives_is_hung_and_the_others_wait_for_it():
    hang = find_hang({0: beat(0, 7, "backward", 9), 1: beat(1, 7, "forward", 8), 2: beat(2, 7, "backward", 9)})
    assert hang["kind"] == "hung" and hang["ranks"] == [1]
    assert (hang["step"], hang["where"], hang["phase"]) == (7, "forward", "timed")
    assert hang["explanation"] == (
        "rank 1 stuck in forward of step 7 (8 collectives issued); "
        "rank 0 waits in collective #9 (backward of step 7); "
        "rank 2 waits in collective #9 (backward of step 7)"
    )
    # Stuck in the optimizer: the others already went on to the next step's all-reduce.
    hang = find_hang({0: beat(0, 8, "backward", 10), 1: beat(1, 7, "optimizer", 9)})
    assert hang["ranks"] == [1] and "optimizer of step 7" in hang["explanation"]


def test_the_flight_recorder_names_what_the_others_wait_in_and_who_skipped():
    ops = {
        0: {8: ("gloo:all_reduce", "[[10]]"), 9: ("gloo:all_reduce", "[[10]]")},
        1: {8: ("gloo:all_reduce", "[[10]]")},
    }
    hang = find_hang({0: beat(0, 7, "backward", 9), 1: beat(1, 7, "backward", 8)}, ops)
    assert hang["kind"] == "hung" and hang["waiting"] == {"0": "all_reduce #9 (backward of step 7)"}
    # Rank 1 skipped #8 (a small bucket): its #8 is the others' #9, so it is one ahead, not hung.
    ops = {
        0: {8: ("gloo:all_reduce", "[[1]]"), 9: ("gloo:all_reduce", "[[99]]")},
        1: {8: ("gloo:all_reduce", "[[99]]")},
    }
    hang = find_hang({0: beat(0, 7, "backward", 9), 1: beat(1, 7, "backward", 8)}, ops)
    assert hang["kind"] == "skipped" and hang["ranks"] == [1]
    assert hang["explanation"].startswith("rank 1 skipped a collective: its collective #8 is all_reduce")
    # Same count, but rank 1 got to the barrier with it: it skipped one on the way.
    ops = {0: {14: ("gloo:all_reduce", "[[99]]")}, 1: {14: ("gloo:barrier", "[]")}}
    hang = find_hang({0: beat(0, 7, "backward", 14), 1: beat(1, 7, "barrier", 14)}, ops)
    assert hang["kind"] == "skipped" and hang["ranks"] == [1] and hang["where"] == "barrier"
    assert (
        "its collective #14 is barrier (the barrier after step 7), while rank 0's is all_reduce" in hang["explanation"]
    )


def test_no_culprit_when_every_rank_is_at_the_same_place():
    assert find_hang({0: beat(0, 7, "forward", 9), 1: beat(1, 7, "forward", 9)}) is None
    assert find_hang({0: beat(0, 9, None, 12, phase="done"), 1: beat(1, 9, None, 12, phase="done")}) is None
    # Heartbeats without collective counts (an older ddpbench) still compare steps.
    old = find_hang({0: {"rank": 0, "step": 4, "phase": "timed"}, 1: {"rank": 1, "step": 3, "phase": "timed"}})
    assert old["ranks"] == [1] and "rank 1 at step 3" in old["explanation"]
    assert place(beat(0, 3, None, 1, phase="checks")) == "the checks phase"


def test_gloo_dumps_need_their_group_named_for_torchs_analyzer(tmp_path):
    raw, fixed = tmp_path / "raw", tmp_path / "fixed"
    shutil.copytree(GLOO_DUMPS, raw)
    verdict = hang_evidence.torch_analyzer_verdict(str(raw), "flight_recorder_rank_")
    assert verdict.startswith("the analyzer failed") and "KeyError" in verdict
    fixed.mkdir()
    for name in os.listdir(raw):
        import pickle

        dump = name_unnamed_groups(pickle.load(open(raw / name, "rb")))
        pickle.dump(dump, open(fixed / name, "wb"))
    verdict = hang_evidence.torch_analyzer_verdict(str(fixed), "flight_recorder_rank_")
    assert "Not all ranks joining collective, sequence number: 9" in verdict and "missing ranks: {1}" in verdict
    ops = hang_evidence.collectives_by_rank(hang_evidence.flight_recorder_files(str(fixed))[1])
    assert max(ops[0]) == 9 and max(ops[1]) == 8 and ops[0][9][0] == "gloo:all_reduce"


def test_the_main_threads_top_frames_come_from_a_stack_dump(tmp_path):
    path = tmp_path / "stacks_stalled_rank_1.txt"
    waiting = threading.Event()

    def blocked_in_user_code():
        waiting.wait(30)

    worker = threading.Thread(target=blocked_in_user_code)
    worker.start()
    time.sleep(0.1)
    with open(path, "w") as handle:
        faulthandler.dump_traceback(file=handle, all_threads=True)
    waiting.set()
    frames = hang_evidence.main_thread_frames(str(path), f"0x{worker.ident:016x}")
    assert frames and frames[-1].endswith("in _bootstrap") and any("blocked_in_user_code" in f for f in frames)


TORCHRUN_SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_16:33:58
  host      : gpu-node
  rank      : 0 (local_rank: 0)
  exitcode  : {code0} (pid: 101)
  error_file: <N/A>
  traceback : Signal {signal0} (SIG) received by PID 101
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : {code1} (pid: 102)
============================================================
"""


def nccl_run_evidence(log_dir, code0, code1):
    """What an NCCL run leaves when rank 1 hangs in forward: rank 0's watchdog aborts it (SIGABRT)
    after the timeout, torchrun ends rank 1; the heartbeats show the stall."""
    os.makedirs(log_dir / "heartbeats")
    with open(log_dir / "output.log", "w") as handle:
        handle.write(TORCHRUN_SUMMARY.format(code0=code0, signal0=-code0, code1=code1))
    for rank, (where, count) in enumerate([("backward", 9), ("forward", 8)]):
        with open(log_dir / "heartbeats" / f"rank-{rank}.json", "w") as handle:
            json.dump(beat(rank, 7, where, count, stalled_s=300.0), handle)


def test_a_hang_aborted_by_nccls_watchdog_is_a_hang_not_a_killed_rank(tmp_path):
    nccl_run_evidence(tmp_path, code0=-6, code1=-15)
    status, error = diagnose(-6, False, None, str(tmp_path), nproc=2)
    assert status == "timeout" and error["hung_ranks"] == [1]
    assert error["message"].startswith("hang: rank 1 stuck in forward of step 7")
    assert error["signals"] == {"0": "SIGABRT"}  # still recorded, as a consequence


def test_a_rank_killed_by_another_signal_is_still_the_cause(tmp_path):
    nccl_run_evidence(tmp_path, code0=-6, code1=-9)
    status, error = diagnose(-6, False, None, str(tmp_path), nproc=2)
    assert status == "failed" and error["message"] == "rank 0 was killed by SIGABRT; rank 1 was killed by SIGKILL"


def test_a_rank_behind_that_raised_its_own_error_failed_rather_than_hung(tmp_path):
    nccl_run_evidence(tmp_path, code0=1, code1=1)
    error_file = tmp_path / "ranks" / "x" / "attempt_0" / "1" / "error.json"
    os.makedirs(error_file.parent)
    error_file.write_text(json.dumps({"message": {"message": "RuntimeError: bad batch", "extraInfo": {}}}))
    status, error = diagnose(1, False, None, str(tmp_path), nproc=2)
    assert status == "failed" and error["message"] == "rank 1 raised RuntimeError: bad batch"


def test_a_killed_rank_hidden_by_its_peer_in_torchruns_summary_is_still_named(tmp_path):
    """The evidence of the race, as a forked group leaves it: torchrun's summary names rank 0, which
    lost its peer; the agent's lines give both exits."""
    peer = "RuntimeError: [pair.cc:545] Read error [127.0.0.1]:31133: Connection reset by peer."
    error_file = tmp_path / "ranks" / "x" / "attempt_0" / "0" / "error.json"
    os.makedirs(error_file.parent)
    error_file.write_text(json.dumps({"message": {"message": peer, "extraInfo": {"timestamp": "1"}}}))
    summary = "  host      : h\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 7)\n"
    agent = [RANK_EXIT_LINE.format(rank=0, local_rank=0, code=1), RANK_EXIT_LINE.format(rank=1, local_rank=1, code=-9)]
    (tmp_path / "output.log").write_text("\n".join(agent) + "\n" + summary)
    status, error = diagnose(1, False, None, str(tmp_path), nproc=2)
    assert (status, error["message"], error["signals"]) == ("failed", "rank 1 was killed by SIGKILL", {"1": "SIGKILL"})
    (tmp_path / "output.log").write_text(summary)  # the summary alone: the peer's error is all there is
    assert diagnose(1, False, None, str(tmp_path), nproc=2)[1]["message"] == f"rank 0 raised {peer}"
