"""`ddpbench trainjob`: the manifests against Kubeflow Trainer's own TrainJob CRD and runtime
(../shared/k8s beside the checkout; skipped, with the reason, where they are absent), what the
pods run, the barrier that keeps the pods on one run, what keeps them on a real cluster (one pod
per node, requests, a run timeout, names JobSet can build on), and bad input. The pods' command
run for real on two hosts is tests/test_two_hosts.py."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time

import pytest
import yaml
from conftest import REPO, ddpbench

from ddpbench.cli import build_parser
from ddpbench.commands.arguments import spec_from_args
from ddpbench.config.plan import SweepOptions, plan_sweep
from ddpbench.running import trainjob

SHARED_K8S = os.path.join(os.path.dirname(REPO), "shared", "k8s")
CRD = os.path.join(SHARED_K8S, "trainer.kubeflow.org_trainjobs.yaml")
RUNTIME = os.path.join(SHARED_K8S, "torch_distributed.yaml")


def load(path: str) -> dict:
    with open(path) as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="module")
def crd() -> dict:
    if not os.path.exists(CRD):
        pytest.skip(f"the TrainJob CRD is not at {CRD} (CI has ../shared/k8s beside the checkout)")
    return load(CRD)


@pytest.fixture(scope="module")
def runtime() -> dict:
    if not os.path.exists(RUNTIME):
        pytest.skip(f"the torch-distributed runtime is not at {RUNTIME} (CI has ../shared/k8s beside the checkout)")
    return load(RUNTIME)


def write_manifests(tmp_path, *extra: str) -> dict[int, dict]:
    folder = tmp_path / "manifests"
    done = ddpbench(
        "trainjob",
        "--node-counts",
        "1,2,4",
        "--gpus-per-node",
        "8",
        "--image",
        "registry.example/ddpbench:1",
        "--sweep-id",
        "k8s-demo",
        "--manifests",
        str(folder),
        *extra,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    manifests = {}
    for name in sorted(os.listdir(folder)):
        manifest = load(folder / name)
        manifests[manifest["spec"]["trainer"]["numNodes"]] = manifest
    assert "ddpbench report /results/k8s-demo" in done.stdout
    return manifests


def validator(crd: dict):
    import jsonschema

    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(schema), schema


def test_manifests_for_1_2_4_nodes_of_8_gpus_pass_the_crd_schema(tmp_path, crd, runtime):
    manifests = write_manifests(tmp_path, "--queue", "team-a", "--suspend", "--env", "NCCL_SOCKET_IFNAME=eth0")
    assert sorted(manifests) == [1, 2, 4]
    check, schema = validator(crd)
    # The CRD's own CEL rules on the name, read from it: a regex and a length.
    rules = [rule["rule"] for rule in schema["x-kubernetes-validations"]]
    (pattern,) = [re.search(r"matches\('(.+)'\)", rule)[1] for rule in rules if "matches(" in rule]
    (limit,) = [int(re.search(r"<= (\d+)", rule)[1]) for rule in rules if "size(" in rule]
    runtime_container = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    for nodes, manifest in manifests.items():
        errors = sorted(check.iter_errors(manifest), key=str)
        assert not errors, f"{nodes} nodes: {errors[0].message} at {list(errors[0].absolute_path)}"
        assert manifest["apiVersion"] == f"{crd['spec']['group']}/v1alpha1" and manifest["kind"] == "TrainJob"
        name = manifest["metadata"]["name"]
        assert re.fullmatch(pattern, name) and len(name) <= limit and name == f"ddpbench-k8s-demo-n{nodes}"
        spec = manifest["spec"]
        assert spec["runtimeRef"]["name"] == runtime["metadata"]["name"] == "torch-distributed"
        assert spec["runtimeRef"]["kind"] == runtime["kind"]
        trainer = spec["trainer"]
        assert trainer["numProcPerNode"] == 8 and trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": 8}
        # Requests by default, one CPU and 4Gi per rank: the scheduler places a pod where its ranks fit.
        assert trainer["resourcesPerNode"]["requests"] == {"cpu": 8, "memory": "32Gi"}
        assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and spec["suspend"] is True
        # The reserved variables are the controller's: nowhere set, only read.
        patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        pod = patch["template"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert patch["name"] == runtime_container["name"] and container["name"] == "node"
        # One pod per machine for a job of several nodes: a required anti-affinity to the job's own label.
        labels = patch["template"]["spec"]["template"]["metadata"]["labels"]
        assert labels == {"ddpbench/trainjob": name}
        if nodes == 1:
            assert "affinity" not in pod
        else:
            (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert term == {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}
        # JobSet names the pods <name>-node-0-<index>-<5 random>: a DNS label too.
        longest = f"{name}-node-0-{nodes - 1}-abcde"
        assert re.fullmatch(pattern, longest) and len(longest) <= limit
        set_names = {item["name"] for item in trainer.get("env", []) + container.get("env", [])}
        assert set_names == {"NCCL_SOCKET_IFNAME", "DDPBENCH_NODE_NAME"}
        assert not set_names & set(trainjob.RESERVED_VARIABLES)
        # The node each pod runs on, from the downward API, for every rank's record.
        assert trainer["env"][-1] == {
            "name": "DDPBENCH_NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        }
        script = trainer["command"][2]
        assert not re.search(r"(?m)(^|;|&&|\benv)\s*(export\s+)?PET_\w+=", script), "the script assigns a PET_ variable"
        # Every run has a timeout by default, and the barrier waits that long and 10 minutes more.
        assert script.count("--run-timeout 1800.0 ") == script.count(" -m ddpbench run ")
        runs = script.count(" -m ddpbench run ")
        assert re.findall(r"(?m)^barrier (\d+)$", script) == (
            [] if nodes == 1 else [str(k) for k in range(1, runs + 1)]
        )
        # The shared volume holds the sweep's folder.
        assert {"name": "results", "mountPath": "/results"} in container["volumeMounts"]
        assert {"name": "results", "persistentVolumeClaim": {"claimName": "ddpbench-results"}} in pod["volumes"]
        assert script.count("--out /results/k8s-demo ") == script.count(" -m ddpbench run ") > 0
        assert manifest["metadata"]["annotations"]["ddpbench/report-command"] == (
            "python -m ddpbench report /results/k8s-demo --sweep-id k8s-demo"
        )
    # A manifest the API server would refuse is refused here too: the check can fail.
    broken = manifests[2]
    broken["spec"]["trainer"]["numNodes"] = "two"
    assert any("'two' is not of type 'integer'" in error.message for error in check.iter_errors(broken))
    pod = broken["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod["template"]["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] = "x"
    assert any("'x' is not of type 'array'" in error.message for error in check.iter_errors(broken))


def test_avoid_hosts_keeps_the_pods_off_those_nodes_and_passes_the_crd_schema(tmp_path, crd):
    manifests = write_manifests(tmp_path, "--avoid-hosts", "gpu-node-7,node-1,gpu-node-7")
    check, _ = validator(crd)
    keep_off = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-node-7", "node-1"]}]}
    for nodes, manifest in manifests.items():
        errors = sorted(check.iter_errors(manifest), key=str)
        assert not errors, f"{nodes} nodes: {errors[0].message} at {list(errors[0].absolute_path)}"
        patch = manifest["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        affinity = patch["template"]["spec"]["template"]["spec"]["affinity"]
        # By node name, the name spec.nodeName gives (the records' node_name): no pod on either node.
        assert affinity["nodeAffinity"] == {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [keep_off]}
        }
        # One pod per machine still holds for several nodes.
        assert ("podAntiAffinity" in affinity) == (nodes > 1)
    # The check can fail: a term the API server would refuse is refused here.
    broken = manifests[2]
    patch = broken["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    terms = patch["template"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] = "x"
    assert any("'x' is not of type 'array'" in error.message for error in check.iter_errors(broken))


def pod_runs(script: str, pet: dict[str, str]) -> list[list[str]]:
    """The `ddpbench run` arguments of each run in a pod's script, its variables expanded as the
    shell expands them."""
    runs = []
    for line in script.splitlines():
        if " -m ddpbench run " not in line or line.startswith(" "):
            continue
        words = shlex.split(line.removesuffix(" || failed=1"))
        words = [re.sub(r"\$(\w+)", lambda match: pet[match[1]], word) for word in words]
        assert words[1:4] == ["-m", "ddpbench", "run"]
        runs.append(words[4:])
    return runs


def test_the_pods_run_the_planned_runs_with_the_runtimes_variables(tmp_path):
    manifests = write_manifests(tmp_path)
    options = SweepOptions(device="cuda", max_world_size=8, cores=8, suite="gpu", launcher="slurm", nodes=(1, 2, 4))
    plan = plan_sweep(options, "/results/k8s-demo")
    seen = []
    for nodes, manifest in manifests.items():
        pet = {
            "PET_NNODES": str(nodes),
            "PET_NPROC_PER_NODE": "8",
            "PET_NODE_RANK": "1" if nodes > 1 else "0",
            "PET_MASTER_ADDR": f"ddpbench-k8s-demo-n{nodes}-node-0-0.ddpbench-k8s-demo-n{nodes}",
            "PET_MASTER_PORT": "29500",
        }
        for words in pod_runs(manifest["spec"]["trainer"]["command"][2], pet):
            args = build_parser().parse_args(["run", *words])
            spec = spec_from_args(args)
            (planned,) = [p for p in plan if p.run_id == spec.run_id]
            if nodes > 1:
                planned = planned.replace(
                    launcher="local",
                    node_rank=1,
                    rdzv_endpoint=f"{pet['PET_MASTER_ADDR']}:29500",
                    rdzv_id=f"ddpbench-k8s-demo-n{nodes}-{spec.run_id}",
                )
            else:
                planned = planned.replace(launcher="local")
            assert spec == planned
            seen.append(spec.run_id)
    assert sorted(seen) == sorted(p.run_id for p in plan)


def test_the_pods_keep_the_profiled_steps_asked_for(tmp_path):
    # As sweep and sbatch do: a script's wait for the slowest rank rests on its profiled steps alone.
    pet = {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "m"}
    pet["PET_MASTER_PORT"] = "29500"
    steps = set()
    for words in pod_runs(write_manifests(tmp_path, "--profile-steps", "6")[1]["spec"]["trainer"]["command"][2], pet):
        spec = spec_from_args(build_parser().parse_args(["run", *words]))
        steps.add((spec.profile, spec.profile_active))
    assert steps == {(True, 6)}


def test_a_pod_of_another_shape_refuses_to_start(tmp_path):
    manifests = write_manifests(tmp_path, "--python", "false")
    script = manifests[2]["spec"]["trainer"]["command"][2]
    done = subprocess.run(
        ["sh", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PET_NNODES": "3", "PET_NPROC_PER_NODE": "8"},
    )
    assert done.returncode == 2
    assert "planned for 2 node(s) x 8 process(es); the runtime set PET_NNODES=3 PET_NPROC_PER_NODE=8" in done.stderr
    # The right shape runs every run, and a failed one makes the pod fail after the others ran.
    one_node = manifests[1]["spec"]["trainer"]["command"][2]
    ran = subprocess.run(["sh", "-c", one_node], capture_output=True, text=True, env={"PET_NNODES": "1", **pet8()})
    assert ran.returncode == 1 and ran.stderr == ""


def pet8() -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "PET_NPROC_PER_NODE": "8",
        "PET_NODE_RANK": "0",
        "PET_MASTER_ADDR": "x",
        "PET_MASTER_PORT": "29500",
    }


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--node-counts", "0"], "must be a whole number >= 1; got '0'"),
        (["--node-counts", "1,-2"], "must be a whole number >= 1; got '-2'"),
        (["--node-counts", "1.5"], "must be a whole number >= 1; got '1.5'"),
        (["--node-counts", "two"], "must be a whole number >= 1; got 'two'"),
        (["--image", ""], "--image is needed"),
        ([None], "--image is needed"),
        (["--out", "results"], "--out 'results' is not on the shared volume"),
        (["--out", "/scratch/results"], "--out '/scratch/results' is not on the shared volume"),
        (["--out", "/results/../etc"], "is not on the shared volume"),
        (["--env", "PET_NODE_RANK=0"], "the TrainJob controller sets PET_NODE_RANK itself"),
        (["--sweep-id", "x" * 60], "Kubernetes allows 63"),
        # The TrainJob name would fit its own 63 characters; the pods JobSet names after it would not.
        (["--sweep-id", "x" * 35, "--node-counts", "1,16"], "give a --sweep-id of at most 34 characters"),
        (["--memory-per-node", "lots"], "--memory-per-node takes a Kubernetes quantity"),
        (["--run-timeout", "0"], "--run-timeout must be a number of seconds > 0"),
        (["--cpus-per-node", "4"], "--cpus-per-node 4 is fewer than the 8 ranks of a node"),
        (["--env", "DDPBENCH_NODE_NAME=x"], "ddpbench sets it in every pod to the pod's node"),
        (["--avoid-hosts", "node[1-3]"], "--avoid-hosts: takes host names separated by commas"),
        (["--avoid-hosts", "node-1,../etc"], "got '../etc'"),
        (["--avoid-hosts", ","], "--avoid-hosts: takes host names"),
        (["--avoid-hosts", "n" * 64], "at most 63"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, arguments, message):
    image = [] if arguments == [None] else ["--image", "registry.example/ddpbench:1"]
    given = [] if arguments == [None] else arguments
    done = ddpbench(
        "trainjob", "--gpus-per-node", "8", *image, *given, "--manifests", str(tmp_path / "m"), cwd=str(tmp_path)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert not os.path.exists(tmp_path / "m")


def test_the_manifest_on_the_kubernetes_page_is_the_one_its_command_writes(tmp_path):
    with open(os.path.join(REPO, "docs", "kubernetes.md")) as handle:
        page = handle.read()
    command = page.split("```sh\n", 1)[1].split("\n#", 1)[0].replace("\\\n", " ")
    words = shlex.split(command)
    assert words[:2] == ["ddpbench", "trainjob"]
    done = ddpbench(*words[1:], "--manifests", str(tmp_path), cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    shown = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    name = yaml.safe_load(shown)["metadata"]["name"]
    assert (tmp_path / f"{name}.yaml").read_text() == shown


STUB = """#!/bin/sh
# The pods' `python`: the barrier is the real module; a run is faked, timed into $RUN_LOG.
if [ "$2" != ddpbench ]; then exec "$REAL_PYTHON" "$@"; fi
shift 3
id=
while [ $# -gt 0 ]; do
  if [ "$1" = --run-id ]; then id=$2; fi
  shift
done
echo "start $PET_NODE_RANK $id $(date +%s.%N)" >> "$RUN_LOG"
if [ "$PET_NODE_RANK" = 1 ] && [ "$id" = mlp-ddp-n2-r1 ]; then
  echo "end $PET_NODE_RANK $id $(date +%s.%N)" >> "$RUN_LOG"
  exit 1  # rank 1's pod fails its first run at once
fi
if [ "$PET_NODE_RANK" = 0 ] && [ "$id" = mlp-ddp-n2-r1 ]; then sleep 2; fi  # pod 0 notices late
echo "end $PET_NODE_RANK $id $(date +%s.%N)" >> "$RUN_LOG"
"""


def barrier_port() -> int:
    """A master port whose next port (the barrier's) is free."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1] - 1


def run_two_pods(tmp_path, script: str) -> dict[tuple[str, int, str], float]:
    """The job's two pods on this machine, at once, with the runtime's variables; what each run
    did and when, by (start|end, pod, run id)."""
    log = tmp_path / "runs.log"
    log.unlink(missing_ok=True)
    port = barrier_port()
    pods = [
        subprocess.Popen(
            ["sh", "-c", script],
            env={
                "PATH": os.environ["PATH"],
                "REAL_PYTHON": sys.executable,
                "RUN_LOG": str(log),
                "PYTHONPATH": REPO,
                "PET_NNODES": "2",
                "PET_NPROC_PER_NODE": "1",
                "PET_NODE_RANK": str(rank),
                "PET_MASTER_ADDR": "127.0.0.1",
                "PET_MASTER_PORT": str(port),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (1, 0)  # the failing pod first: it must wait for pod 0 all the same
    ]
    for rank, pod in zip((1, 0), pods):
        _, err = pod.communicate(timeout=60)
        # Every run ran on both; pod 1 ends failed, as one of its runs did.
        # not chance: the stub fails pod 1's first run by its script, and the pod's exit says so
        assert (pod.returncode, err) == (1 if rank == 1 else 0, ""), err
    events = {}
    for line in log.read_text().splitlines():
        what, rank, run_id, at = line.split()
        events[(what, int(rank), run_id)] = float(at)
    return events


def test_a_failed_run_on_one_pod_does_not_put_the_pods_a_run_apart(tmp_path):
    """Pod 1's first run fails at once while pod 0's goes on for 2 s: pod 1 starts the second run
    only once pod 0 has finished the first, and both run it. Without the barrier (its lines taken
    out of the same script) pod 1 starts the second run while pod 0 is still in the first: the
    desynchronisation the barrier prevents, so the check can fail."""
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    folder = tmp_path / "m"
    done = ddpbench(
        "trainjob", "--node-counts", "2", "--max-nproc", "1", "--suite", "smoke", "--strategies", "ddp",
        "--repeat", "2", "--image", "i", "--sweep-id", "sync", "--python", str(stub), "--manifests", str(folder),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    script = load(folder / "ddpbench-sync-n2.yaml")["spec"]["trainer"]["command"][2]
    started = time.monotonic()
    events = run_two_pods(tmp_path, script)
    # not chance: pods in step take seconds (a 2 s sleep, two interpreters' starts); a barrier that
    # waited out its timeout, minutes
    assert time.monotonic() - started < 30
    assert events[("start", 1, "mlp-ddp-n2-r2")] >= events[("end", 0, "mlp-ddp-n2-r1")]
    assert events[("start", 0, "mlp-ddp-n2-r2")] >= events[("end", 1, "mlp-ddp-n2-r1")]
    assert {("end", 0, "mlp-ddp-n2-r2"), ("end", 1, "mlp-ddp-n2-r2")} <= set(events)
    unguarded = "\n".join(line for line in script.splitlines() if not re.fullmatch(r"barrier \d+", line))
    events = run_two_pods(tmp_path, unguarded)
    assert events[("start", 1, "mlp-ddp-n2-r2")] < events[("end", 0, "mlp-ddp-n2-r1")]


def test_a_pod_that_never_arrives_stops_the_others_with_why(capsys):
    from ddpbench.running import pod_barrier

    port = barrier_port() + 1
    common = ["--job", "j", "--barrier", "3", "--nodes", "3", "--host", "127.0.0.1", "--port", str(port)]
    assert pod_barrier.main([*common, "--node-rank", "0", "--timeout", "1"]) == 1
    assert capsys.readouterr().err == (
        "ddpbench: pods 1, 2 of j did not reach run 3 within 1 s; the remaining runs are not started\n"
    )
    assert pod_barrier.main([*common, "--node-rank", "2", "--timeout", "1"]) == 1
    assert capsys.readouterr().err == (
        f"ddpbench: pod 0 of j (127.0.0.1:{port}) did not start run 3 within 1 s; the remaining runs are not "
        "started\n"
    )


def test_every_pod_of_several_nodes_waits_a_bounded_time_for_pod_0s_name(tmp_path, capsys):
    """pod 0 hosts the rendezvous store only if PET_MASTER_ADDR resolves to itself; the headless
    service's record comes late. The script waits for it before the first barrier, with a fake
    resolver and clock here: it retries until the name resolves, and gives up at the timeout."""
    from ddpbench.running import dns_wait
    from ddpbench.running.trainjob import node_script

    script = node_script([(["--workload", "mlp"], "rdzv-1")], nodes=2, nproc_per_node=8, python="python", job="j")
    lines = script.splitlines()
    wait = next(i for i, line in enumerate(lines) if "-m ddpbench.running.dns_wait" in line)
    assert '--host "$PET_MASTER_ADDR"' in lines[wait] and lines[wait].endswith("|| exit 1")
    assert wait < lines.index("barrier 1")
    one_node = node_script([(["--workload", "mlp", "--nproc", "8"], None)], nodes=1, nproc_per_node=8, python="python")
    assert "dns_wait" not in one_node  # torchrun --standalone: no name to resolve

    now = [0.0]
    answers = iter([OSError("Name or service not known")] * 3 + [None])

    def resolve(host):
        answer = next(answers)
        if answer:
            raise answer

    def sleep(seconds):
        now[0] += seconds

    assert dns_wait.wait_for_name("pod-0.job", 300, resolve, lambda: now[0], sleep) == (True, 4, "")
    assert now[0] == 3 * dns_wait.RETRY_S

    def never(host):
        raise OSError("Name or service not known")

    now[0] = 0.0
    resolved, attempts, error = dns_wait.wait_for_name("pod-0.job", 10, never, lambda: now[0], sleep)
    assert (resolved, attempts, error) == (False, 6, "Name or service not known") and now[0] == 10
    assert dns_wait.main(["--host", "no-such-pod.invalid", "--timeout", "0"]) == 1
    assert "did not resolve within 0 s" in capsys.readouterr().err


def test_the_minimum_trainer_release_is_stated_and_the_crd_has_the_api_it_rests_on(tmp_path, crd):
    from ddpbench.running.trainjob import MINIMUM_TRAINER

    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    # The manifests need runtimePatches; the API it replaced (before v2.2.0) is gone from this CRD.
    assert "runtimePatches" in spec and "podTemplateOverrides" not in spec
    assert MINIMUM_TRAINER == "v2.2.1"
    with open(os.path.join(REPO, "docs", "kubernetes.md")) as handle:
        assert f"Kubeflow Trainer {MINIMUM_TRAINER} or later" in handle.read()
    done = ddpbench(
        "trainjob", "--node-counts", "1", "--gpus-per-node", "8", "--workloads", "mlp", "--image", "i",
        "--sweep-id", "t", "--manifests", str(tmp_path), cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"needs Kubeflow Trainer {MINIMUM_TRAINER} or later" in done.stdout
