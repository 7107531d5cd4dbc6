"""Two hosts in one machine: the exact command of `ddpbench trainjob`'s pods, run as two "nodes"
(network and UTS namespaces node-0 and node-1 joined by a veth pair, benchmarks/two_hosts.py) with
the variables the torch-distributed runtime injects, writing to one shared folder. One unshaped
2-node x 1-rank gloo run serves most assertions; a 2-node job of two runs whose first run loses
rank 1 shows that the pods stay on one run. What a shaped link does to explain's causes is measured
by the same script over a tbf-shaped link: docs/measurements/two-hosts.md.

Needs root and iproute2; skipped with the reason elsewhere, and where CI says it can run
(DDPBENCH_REQUIRE_NETNS) a failure to make the namespaces fails the test instead."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import REPO, ddpbench

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import two_hosts  # noqa: E402

pytestmark = pytest.mark.launches


@pytest.fixture(scope="module")
def hosts():
    try:
        made = two_hosts.start(f"t{os.getpid()}")
    except two_hosts.Unavailable as exc:
        if os.environ.get("DDPBENCH_REQUIRE_NETNS"):
            pytest.fail(f"DDPBENCH_REQUIRE_NETNS is set but {exc}")
        pytest.skip(str(exc))
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture(scope="module")
def sweeps(hosts, tmp_path_factory):
    work = str(tmp_path_factory.mktemp("two-hosts"))
    folders, sent = two_hosts.run_both(hosts, work, None)
    return folders, sent


KILLED_STEP = 5
"""A timed step of the smoke suite (12 steps, 2 of warm-up): rank 1 is killed inside the run."""


@pytest.fixture(scope="module")
def killed_then_next(hosts, tmp_path_factory):
    """A 2-node job of two runs, rank 1 killed in the first (as a pod's rank dies on a real
    cluster), the pods run as they are written otherwise: (the records' folder, each pod's exit code
    and output)."""
    work = str(tmp_path_factory.mktemp("killed-then-next"))
    out = os.path.join(work, "volume")
    os.makedirs(os.path.join(work, "manifests"))
    (manifest,) = two_hosts.manifests(
        os.path.join(work, "manifests"), "sync", out, "--strategies", "ddp", "--repeat", "2"
    ).values()
    trainer = manifest["spec"]["trainer"]
    script = trainer["command"][2]
    first = "--run-id mlp-ddp-n2-r1 "
    assert script.count(first) == 1 and "--run-id mlp-ddp-n2-r2 " in script
    trainer["command"][2] = script.replace(first, f"{first}--inject-fault rank=1,kind=kill,step={KILLED_STEP} ")
    results = hosts.run_pods(trainer["command"], two_hosts.pod_environment(manifest), 2, 1, timeout=600)
    return os.path.join(out, "sync"), results


def record(folder: str, run_id: str) -> dict:
    with open(os.path.join(folder, "runs", f"{run_id}.json")) as handle:
        return json.load(handle)


def test_a_two_node_job_runs_across_the_link_with_a_host_name_per_node(sweeps):
    folders, sent = sweeps
    two = record(folders["unshaped"], "mlp-ddp-n2")
    assert two["status"] == "ok" and two["checks"]["replicas_in_sync"]["ok"], two.get("error")
    assert two["spec"]["nnodes"] == 2 and two["spec"]["nproc"] == 1 and two["spec"]["world_size"] == 2
    # Every rank names the host it ran on: two distinct names, neither the machine's own.
    # not chance: each node's namespace has the host name the test gave it
    assert {rank["rank"]: rank["hostname"] for rank in two["ranks"]} == {0: "node-0", 1: "node-1"}
    # Where each rank ran, as the history keeps it: the node the downward API names, its node rank
    # and CPU set (no GPU).
    # not chance: the pods' node names and ranks are the ones the test's TrainJob variables give them
    assert {rank["rank"]: (rank["node_name"], rank["node_rank"]) for rank in two["ranks"]} == {
        0: ("node-0", 0),
        1: ("node-1", 1),
    }
    assert all(rank["cpu_set"] and rank["device_uuid"] is None for rank in two["ranks"])
    # The rendezvous is the one the runtime's variables name (pod 0 at PET_MASTER_ADDR:PET_MASTER_PORT).
    assert two["spec"]["rdzv_endpoint"] == "node-0:29500"
    recorded = two["env"]["env_vars"]
    assert recorded["PET_NNODES"] == "2" and recorded["PET_MASTER_ADDR"] == "node-0"
    assert two["spec"]["backend"] == "gloo" and recorded["GLOO_SOCKET_IFNAME"] == "eth0"
    # The gradients crossed the veth, both ways: far more than a rendezvous' few kilobytes.
    assert min(sent["unshaped"]) > 20e6, sent
    # One record, written by global rank 0, in the folder both pods share; the 1-node job's too.
    runs = sorted(os.listdir(os.path.join(folders["unshaped"], "runs")))
    assert [name for name in runs if name.endswith(".json")] == ["mlp-ddp-n2.json", "mlp-local-n1.json"]


def test_the_report_groups_the_ranks_by_host(sweeps, tmp_path):
    folders, _ = sweeps
    output = tmp_path / "report.html"
    done = ddpbench("report", folders["unshaped"], "-o", str(output))
    assert done.returncode == 0, done.stderr
    page = output.read_text()
    table = page[page.index("mlp-ddp-n2: ranks by host") :]
    table = table[: table.index("</table>")]
    assert table.count("<tr") == 3 and "node-0" in table and "node-1" in table


@pytest.mark.test_all  # make test runs the two-node job in the tests above, and kills a rank in test_faults
def test_a_rank_killed_in_one_run_does_not_desynchronise_the_next(killed_then_next):
    folder, results = killed_then_next
    # Each pod ran both runs and ended failed, for the first; neither gave up at a barrier.
    for code, output in results:
        assert code == 1, output[-3000:]
        assert "did not reach run" not in output and "did not start run" not in output, output[-3000:]
    killed = record(folder, "mlp-ddp-n2-r1")
    assert killed["status"] != "ok", killed["status"]
    # The second run met both pods: ok, one rank on each host, in sync.
    second = record(folder, "mlp-ddp-n2-r2")
    assert second["status"] == "ok" and second["checks"]["replicas_in_sync"]["ok"], second.get("error")
    # not chance: each node's namespace has the host name the test gave it
    assert {rank["rank"]: rank["hostname"] for rank in second["ranks"]} == {0: "node-0", 1: "node-1"}
    # not chance: the fault the test injected in the first run's spec, none in the second's
    assert second["spec"]["fault"] is None and killed["spec"]["fault"]["rank"] == 1
