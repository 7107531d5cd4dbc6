"""Two hosts in one machine, and what a shaped link between them does to a 2-node DDP run.

Two network and UTS namespaces, `node-0` and `node-1`, each with its own host name, joined by a
veth pair (eth0 in both, 10.77.0.1 and 10.77.0.2, a private /24 that exists only inside them), and
an /etc/hosts of their own (`ip netns exec` mounts /etc/netns/<name>/hosts over /etc/hosts) so that
node-0's name resolves as a pod's does through the job's headless service. Each "pod" runs the
exact command of a `ddpbench trainjob` manifest with the variables the torch-distributed runtime
injects (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT=29500),
and both write to one folder, as pods sharing a volume do.

As a benchmark (root, iproute2): the 2-node x 1-rank smoke run with the link as it is, then with a
tbf qdisc on both ends, and what the breakdown says grew:

    python benchmarks/two_hosts.py --rate 100mbit

tests/test_two_hosts.py uses the same namespaces for its assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOSTNAMES = ("node-0", "node-1")
ADDRESSES = ("10.77.0.1", "10.77.0.2")
PREFIX = 24
INTERFACE = "eth0"
"""The name a pod's interface has; GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME name it in the manifests."""
MASTER_PORT = 29500
"""The port the runtime puts in PET_MASTER_PORT."""
NETNS_FOLDER = "/etc/netns"
"""`ip netns exec X` mounts the files of /etc/netns/X/ over those of /etc/."""
BURST = "32kb"
"""tbf's bucket: it must exceed the MTU (1500 on the veth), or no packet ever leaves."""


class Unavailable(Exception):
    """The namespaces cannot be made here; the message says why."""


def _ip(*args: str, namespace: str | None = None) -> subprocess.CompletedProcess:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    return subprocess.run([*prefix, *args], capture_output=True, text=True)


@dataclass
class TwoHosts:
    namespaces: tuple[str, str]
    made_netns_folder: bool = False
    """/etc/netns did not exist before: removed again with the namespaces' own folders."""

    def hosts_file(self, namespace: str) -> str:
        return os.path.join(NETNS_FOLDER, namespace, "hosts")

    def remove(self) -> None:
        """Delete both namespaces (the veth goes with them) and their /etc/netns folders."""
        for namespace in self.namespaces:
            _ip("ip", "netns", "delete", namespace)
            shutil.rmtree(os.path.dirname(self.hosts_file(namespace)), ignore_errors=True)
        if self.made_netns_folder and os.path.isdir(NETNS_FOLDER) and not os.listdir(NETNS_FOLDER):
            os.rmdir(NETNS_FOLDER)

    def shape(self, rate: str) -> None:
        """A token bucket on both ends of the link: every byte between the nodes at `rate`."""
        for namespace in self.namespaces:
            done = _ip(
                "tc", "qdisc", "replace", "dev", INTERFACE, "root", "tbf", "rate", rate, "burst", BURST, "latency",
                "50ms", namespace=namespace,
            )  # fmt: skip
            if done.returncode != 0:
                raise Unavailable(f"cannot shape the link with tc tbf: {done.stderr.strip()}")

    def unshape(self) -> None:
        for namespace in self.namespaces:
            _ip("tc", "qdisc", "delete", "dev", INTERFACE, "root", namespace=namespace)

    def link_bytes(self, node: int) -> int:
        """Bytes node `node` has sent over its end of the veth."""
        done = _ip("cat", f"/sys/class/net/{INTERFACE}/statistics/tx_bytes", namespace=self.namespaces[node])
        return int(done.stdout.strip() or 0)

    def pod_command(self, node: int, command: list[str]) -> list[str]:
        """`command` on node `node`: in its network namespace, in a UTS namespace of its own whose
        host name is node-<node> (the machine's own host name stays as it was)."""
        return [
            "ip", "netns", "exec", self.namespaces[node],
            "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', HOSTNAMES[node], *command,
        ]  # fmt: skip

    def run_pods(self, command: list[str], env: dict, nodes: int, nproc: int, timeout: float) -> list:
        """The job's `nodes` pods, each running `command` with the runtime's variables, at once.
        Returns each pod's (exit code, output); a pod still running at `timeout` is ended."""
        pods = []
        for node in range(nodes):
            runtime = {
                "PET_NNODES": str(nodes),
                "PET_NPROC_PER_NODE": str(nproc),
                "PET_NODE_RANK": str(node),
                "PET_MASTER_ADDR": HOSTNAMES[0],
                "PET_MASTER_PORT": str(MASTER_PORT),
            }
            pods.append(
                subprocess.Popen(
                    self.pod_command(node, command),
                    env={**env, **runtime},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,  # the whole pod can be ended as one group
                )
            )
        results = []
        for pod in pods:
            try:
                output, _ = pod.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(pod.pid, signal.SIGKILL)
                output, _ = pod.communicate()
            results.append((pod.returncode, output))
        return results


def start(tag: str) -> TwoHosts:
    """Make the two hosts, or raise Unavailable (having removed whatever was made)."""
    for program in ("ip", "tc", "unshare"):
        if shutil.which(program) is None:
            raise Unavailable(f"needs `{program}` (iproute2, util-linux) and root")
    hosts = TwoHosts((f"ddpb-{tag}-0", f"ddpb-{tag}-1"), made_netns_folder=not os.path.exists(NETNS_FOLDER))
    ends = (f"ddpb{tag[-6:]}a", f"ddpb{tag[-6:]}b")  # interface names: 15 characters at most
    try:
        for namespace in hosts.namespaces:
            done = _ip("ip", "netns", "add", namespace)
            if done.returncode != 0:
                raise Unavailable(f"`ip netns add` does not work here: {done.stderr.strip()}")
        done = _ip("ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        if done.returncode != 0:
            raise Unavailable(f"cannot make a veth pair: {done.stderr.strip()}")
        names = "".join(f"{address} {name}\n" for address, name in zip(ADDRESSES, HOSTNAMES))
        for namespace, end, address in zip(hosts.namespaces, ends, ADDRESSES):
            steps = [
                (None, ("ip", "link", "set", end, "netns", namespace)),
                (namespace, ("ip", "link", "set", end, "name", INTERFACE)),
                (namespace, ("ip", "address", "add", f"{address}/{PREFIX}", "dev", INTERFACE)),
                (namespace, ("ip", "link", "set", INTERFACE, "up")),
                (namespace, ("ip", "link", "set", "lo", "up")),
            ]
            for inside, command in steps:
                done = _ip(*command, namespace=inside)
                if done.returncode != 0:
                    raise Unavailable(f"{' '.join(command)} failed: {done.stderr.strip()}")
            os.makedirs(os.path.dirname(hosts.hosts_file(namespace)), exist_ok=True)
            with open(hosts.hosts_file(namespace), "w") as handle:
                handle.write(f"127.0.0.1 localhost\n{names}")
        return hosts
    except BaseException:
        hosts.remove()
        _ip("ip", "link", "delete", ends[0])
        raise


# --- the benchmark ------------------------------------------------------------------------------


def manifests(folder: str, sweep_id: str, out: str) -> dict[int, dict]:
    """`ddpbench trainjob` for a 2-node smoke sweep of one rank per node (its 1-node job is the
    local reference), in the pods of this machine (this Python, the records under `out`), by node
    count."""
    done = subprocess.run(
        [
            sys.executable, "-m", "ddpbench", "trainjob", "--nodes", "2", "--nproc-per-node", "1",
            "--suite", "smoke", "--strategies", "local,ddp", "--image", "ddpbench:local", "--python", sys.executable,
            "--mount-path", out, "--sweep-id", sweep_id, "--env", f"GLOO_SOCKET_IFNAME={INTERFACE}",
            "--run-timeout", "240", "--manifests", folder,
        ],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO}, cwd=folder,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    found = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as handle:
            manifest = yaml.safe_load(handle)
        found[manifest["spec"]["trainer"]["numNodes"]] = manifest
    return found


def pod_environment(manifest: dict) -> dict:
    """What a pod's container has: this environment (no GPUs: a CPU job), this checkout on the
    path, and the manifest's own variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=REPO, DDPBENCH_CANARY="off")
    env.update({item["name"]: item["value"] for item in manifest["spec"]["trainer"].get("env", [])})
    return env


def run_job(hosts: TwoHosts, manifest: dict, timeout: float = 420) -> list:
    trainer = manifest["spec"]["trainer"]
    results = hosts.run_pods(
        trainer["command"], pod_environment(manifest), trainer["numNodes"], trainer["numProcPerNode"], timeout
    )
    for code, output in results:
        if code != 0:
            raise RuntimeError(f"a pod of {manifest['metadata']['name']} exited {code}:\n{output[-3000:]}")
    return results


def breakdown(sweep_dir: str) -> dict:
    path = os.path.join(sweep_dir, "explain.json")
    done = subprocess.run(
        [sys.executable, "-m", "ddpbench", "explain", sweep_dir, "--json", path],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    with open(path) as handle:
        return {item["run_id"]: item for item in json.load(handle)}


def run_both(hosts: TwoHosts, work: str, rate: str) -> tuple[dict[str, str], dict[str, list[int]]]:
    """The unshaped sweep (its 1-node job on node-0, its 2-node job on both), then the 2-node job
    of a second sweep over the shaped link. The second sweep gets the first one's local run: a
    one-process run on one node sends nothing over the link. Returns the two sweeps' folders and
    the bytes each node sent over the link during each sweep's 2-node job."""
    out = os.path.join(work, "volume")
    folders, sent = {}, {}
    for sweep_id in ("unshaped", "shaped"):
        os.makedirs(os.path.join(work, sweep_id), exist_ok=True)
        jobs = manifests(os.path.join(work, sweep_id), sweep_id, out)
        folders[sweep_id] = os.path.join(out, sweep_id)
        before = [hosts.link_bytes(node) for node in (0, 1)]
        if sweep_id == "unshaped":
            run_job(hosts, jobs[1])
            before = [hosts.link_bytes(node) for node in (0, 1)]
            run_job(hosts, jobs[2])
        else:
            os.makedirs(os.path.join(folders["shaped"], "runs"), exist_ok=True)
            shutil.copy(
                os.path.join(folders["unshaped"], "runs", "mlp-local-n1.json"),
                os.path.join(folders["shaped"], "runs", "mlp-local-n1.json"),
            )
            hosts.shape(rate)
            try:
                run_job(hosts, jobs[2])
            finally:
                hosts.unshape()
        sent[sweep_id] = [hosts.link_bytes(node) - was for node, was in zip((0, 1), before)]
    return folders, sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="100mbit", help="the shaped link's rate (tc tbf; default 100mbit)")
    args = parser.parse_args()
    try:
        hosts = start(str(os.getpid()))
    except Unavailable as exc:
        print(f"two_hosts: cannot run here: {exc}", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="two-hosts-")
    try:
        folders, sent = run_both(hosts, work, args.rate)
    finally:
        hosts.remove()
    print("| link | step (ms) | exposed communication (ms/step) | MB sent by node-0, node-1 | hosts of the ranks |")
    print("|---|---|---|---|---|")
    for sweep_id, folder in folders.items():
        found = breakdown(folder)["mlp-ddp-n2"]
        with open(os.path.join(folder, "runs", "mlp-ddp-n2.json")) as handle:
            record = json.load(handle)
        names = ", ".join(f"rank {rank['rank']} {rank['hostname']}" for rank in record["ranks"])
        exposed = found["terms"]["exposed_comm"]["s_per_step"]
        label = sweep_id if sweep_id == "unshaped" else f"shaped, {args.rate}"
        megabytes = ", ".join(f"{count / 1e6:.1f}" for count in sent[sweep_id])
        print(f"| {label} | {found['step_s'] * 1e3:.2f} | {exposed * 1e3:.2f} | {megabytes} | {names} |")
    print(f"records and breakdowns: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
