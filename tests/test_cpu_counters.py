"""What the kernel counts of a rank's CPU (`ddpbench.host.cpu_denied`): the files it reads, parsed
from fixed text, and the counters of this very process read for real: a thread that shares its
core with a spinning process waits for it, a thread named like gloo's is the collective library's,
a child process is a DataLoader worker's."""

import os
import subprocess
import sys
import threading
import time

import pytest
from chance import mean_at_least

from ddpbench.host.cpu_denied import (
    CpuCounters,
    StepCounters,
    cgroup_cpu_dirs,
    difference,
    pressure_ns,
    quota_cores,
    throttled_ns,
)

SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def test_cpu_stat_and_pressure_are_read_in_nanoseconds():
    assert throttled_ns(b"nr_periods 10\nnr_throttled 4\nthrottled_time 123456789\n") == 123456789
    assert throttled_ns(b"usage_usec 9\nnr_throttled 2\nthrottled_usec 1500\n") == 1_500_000  # cgroup v2
    assert throttled_ns(b"usage_usec 9\n") is None
    text = b"some avg10=1.00 avg60=0.50 avg300=0.10 total=6589757\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    assert pressure_ns(text) == 6_589_757_000


def _cgroup_tree(root, controller: str, path: str, quota_us: int | None) -> None:
    folder = root / controller / path.strip("/")
    folder.mkdir(parents=True)
    (root / controller / "cpu.stat").write_text("throttled_time 0\n")
    (folder / "cpu.stat").write_text("throttled_time 0\n")
    (root / controller / "cpu.cfs_quota_us").write_text("-1\n")
    (root / controller / "cpu.cfs_period_us").write_text("100000\n")
    (folder / "cpu.cfs_quota_us").write_text(f"{quota_us if quota_us else -1}\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")


def test_the_cgroups_that_can_hold_a_process_back_are_its_own_and_its_ancestors(tmp_path):
    _cgroup_tree(tmp_path, "cpu", "/job/rank1", 50000)
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpuacct:/\n4:cpu:/job/rank1\n0::/\n")
    found = cgroup_cpu_dirs(str(proc), str(tmp_path))
    assert found == [str(tmp_path / "cpu" / "job" / "rank1"), str(tmp_path / "cpu")]  # no cpu.stat in /job
    assert quota_cores(found[0]) == 0.5 and quota_cores(found[1]) is None
    # cgroup v2 only: the unified hierarchy, cpu.max.
    (tmp_path / "v2" / "pod").mkdir(parents=True)
    (tmp_path / "v2" / "cpu.stat").write_text("throttled_usec 0\n")
    (tmp_path / "v2" / "pod" / "cpu.stat").write_text("throttled_usec 0\n")
    (tmp_path / "v2" / "pod" / "cpu.max").write_text("150000 100000\n")
    proc.write_text("0::/pod\n")
    found = cgroup_cpu_dirs(str(proc), str(tmp_path / "v2"))
    assert found[0] == str(tmp_path / "v2" / "pod") and quota_cores(found[0]) == 1.5
    proc.write_text("garbage\n")
    assert cgroup_cpu_dirs(str(proc), str(tmp_path)) == []
    assert cgroup_cpu_dirs(str(tmp_path / "missing"), str(tmp_path)) == []


def test_differences_are_seconds_by_field_and_none_where_a_reading_is_missing():
    first = (1_000_000_000, 0, 0, 0, 0, 0, 0, 0, None, 10)
    last = (1_500_000_000, 250_000_000, 0, 0, 0, 0, 0, 0, None, 20)
    found = difference(first, last)
    assert found["cpu_s"] == 0.5 and found["waited_s"] == 0.25 and found["throttled_s"] is None
    assert difference(None, last) is None


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="needs Linux's /proc schedstat")
def test_a_thread_sharing_its_core_with_a_spinning_process_waits_for_it():
    """Pinned to one CPU beside a spinning process pinned there too, this thread gets about half the
    core: in each 50 ms slice it waits for a core about half the time, and its time on a core and its
    waiting add up to the slice (it never blocks). (Alone it would wait next to nothing; on this
    shared 2-core machine nothing guarantees a free CPU, so that half is not asserted.)"""
    cpu = sorted(os.sched_getaffinity(0))[0]
    keep = os.sched_getaffinity(0)
    counters = CpuCounters()
    spinner = subprocess.Popen([sys.executable, "-c", SPIN, str(cpu)])
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.2)  # the spinner is running
        shares, sums = [], []
        for _ in range(8):
            first, started = counters.read(), time.perf_counter()
            while time.perf_counter() - started < 0.05:
                pass
            wall = time.perf_counter() - started
            found = difference(first, counters.read())
            shares.append(found["waited_s"] / wall)
            sums.append((found["cpu_s"] + found["waited_s"]) / wall)
    finally:
        spinner.kill()
        spinner.wait()
        os.sched_setaffinity(0, keep)
    # A fair share of one core is half of it; 0.2 leaves room for the scheduler's slices.
    mean_at_least(shares, 0.2, missing=0.0, what="share of each slice waited for a core beside a spinner")
    mean_at_least(sums, 0.8, missing=0.5, what="time on a core plus waiting, over the slice")


def test_threads_are_grouped_by_what_their_waiting_costs():
    """A thread named like gloo's loop is the collective library's; another thread of the process is
    one of the rank's other threads; the harness's own Python threads are neither; a child process
    is a DataLoader worker's."""
    stop = threading.Event()
    named = threading.Event()

    def comm_like():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as handle:
            handle.write("gloo_tcp_loop")
        named.set()
        stop.wait()

    thread = threading.Thread(target=comm_like, daemon=True)
    thread.start()
    named.wait(5)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        counters = CpuCounters()
        if not counters.available:
            pytest.skip("needs Linux's /proc schedstat")
        # The gloo-named thread is a Python thread: the harness's threads are left out unless
        # named as the collective library's.
        assert counters.counts["comm"] == 1, counters.counts
        # The child is read as a DataLoader worker; the test's process may hold others (pytest's).
        assert counters.counts["loader_processes"] >= 1, counters.counts
        assert any(path.startswith(f"/proc/{child.pid}/task/") for path in counters.loader.files), counters.counts
        clock = StepCounters(counters)
        clock.mark()
        clock.mark()
        steps = clock.per_step()
        assert set(steps) >= {"cpu_s", "waited_s", "comm_waited_s", "loader_waited_s"}
        assert len(steps["cpu_s"]) == 1
    finally:
        stop.set()
        child.kill()
        child.wait()
        thread.join()
