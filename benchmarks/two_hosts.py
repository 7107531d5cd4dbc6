"""Two hosts in one machine, and what a shaped link between them does to a 2-node DDP run.

Two network and UTS namespaces, `node-0` and `node-1`, each with its own host name, joined by a
veth pair (eth0 in both, 10.77.0.1 and 10.77.0.2, a private /24 that exists only inside them), and
an /etc/hosts of their own (`ip netns exec` mounts /etc/netns/<name>/hosts over /etc/hosts) so that
node-0's name resolves as a pod's does through the job's headless service. Each "pod" runs the
exact command of a `ddpbench trainjob` manifest with the variables the torch-distributed runtime
injects (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT=29500),
and both write to one folder, as pods sharing a volume do.

As a benchmark (root, iproute2): for each --rate, the 2-node x 1-rank smoke run with the link as it
is, then with a tbf qdisc on both ends at that rate, and what the breakdown says grew. Several rates
in one invocation: `--rate 1gbit --rate 100mbit` or `--rate 1gbit,100mbit`. The whole measurement
holds /tmp/ddpbench-bench.lock (benchmarks/bench_lock.py): it takes the lock itself, or runs under
the caller's `flock /tmp/ddpbench-bench.lock ...`.

Prints the page and writes it to --page (docs/measurements/two-hosts.md; --no-page only prints).
The runs stay in --out with what the measuring command did (OUT/measurement.json); --analyse-only
writes the page from them again and measures nothing.

    python benchmarks/two_hosts.py --rate 1gbit --rate 100mbit
    python benchmarks/two_hosts.py --analyse-only

tests/test_two_hosts.py uses the same namespaces for its assertions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from bench_lock import LOCK, bench_lock  # noqa: E402
from measurement_page import add_page_options, analysis_facts, command_line, commit_of, write_page  # noqa: E402

from ddpbench.host.facts import cpu_model, project_git, usable_cores  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "two-hosts.md")
MEASUREMENT = "measurement.json"
"""In --out: what the measuring command was and did, for the page that --analyse-only writes."""
WIDTH = 100
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
LATENCY = "50ms"
"""The longest a packet may wait in tbf's queue before it is dropped."""


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
                LATENCY, namespace=namespace,
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
                # What the manifests' downward API gives a pod: the node it runs on (spec.nodeName).
                "DDPBENCH_NODE_NAME": HOSTNAMES[node],
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


def manifests(folder: str, sweep_id: str, out: str, *extra: str) -> dict[int, dict]:
    """`ddpbench trainjob` for a 2-node smoke sweep of one rank per node (its 1-node job is the
    local reference), in the pods of this machine (this Python, the records under `out`), by node
    count; `extra` options go last (`--strategies ddp --repeat 2`: one 2-node job of two runs)."""
    done = subprocess.run(
        [
            sys.executable, "-m", "ddpbench", "trainjob", "--node-counts", "2", "--max-nproc", "1",
            "--suite", "smoke", "--strategies", "local,ddp", "--repeat", "1", "--image", "ddpbench:local",
            "--python", sys.executable,
            "--mount-path", out, "--sweep-id", sweep_id, "--env", f"GLOO_SOCKET_IFNAME={INTERFACE}",
            "--run-timeout", "240", "--manifests", folder, *extra,
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
    # Variables the downward API fills in (valueFrom) are the runtime's: run_pods sets them per pod.
    env.update({item["name"]: item["value"] for item in manifest["spec"]["trainer"].get("env", []) if "value" in item})
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
        [sys.executable, "-m", "ddpbench", "explain", sweep_dir, "--json-file", path],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    with open(path) as handle:
        found = json.load(handle)
    return {run["run_id"]: run for configuration in found["configurations"] for run in configuration["by_run"]}


def as_term(entry: dict | None) -> dict:
    """A cause or check of explain's JSON as this page reads it: seconds per step and its interval."""
    seconds = (entry or {}).get("seconds") or {}
    return {"s_per_step": seconds.get("value"), "ci_low_s": seconds.get("low"), "ci_high_s": seconds.get("high")}


def run_both(hosts: TwoHosts, work: str, rate: str | None) -> tuple[dict[str, str], dict[str, list[int]]]:
    """The unshaped sweep (its 1-node job on node-0, its 2-node job on both), then (unless `rate` is
    None) the 2-node job of a second sweep over the shaped link. The second sweep gets the first one's local run: a
    one-process run on one node sends nothing over the link. Returns the two sweeps' folders and
    the bytes each node sent over the link during each sweep's 2-node job."""
    out = os.path.join(work, "volume")
    folders, sent = {}, {}
    for sweep_id in ("unshaped", "shaped") if rate else ("unshaped",):
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


# --- the measurement and its page -----------------------------------------------------------------


def rates_of(values: list[str] | None) -> list[str]:
    """--rate as given: repeated, comma lists, or both; 100mbit where none is."""
    rates = [rate.strip() for value in values or ["100mbit"] for rate in value.split(",") if rate.strip()]
    return rates or ["100mbit"]


def measure(out: str, rates: list[str], command: str) -> dict:
    """Each rate's unshaped and shaped pair in turn, under one hold of the lock; what was done, as
    OUT/measurement.json keeps it. A pair that fails is kept with its error and the next one runs."""
    waited = time.time()
    hosts = start(str(os.getpid()))
    try:
        with bench_lock() as locked_by:
            started = time.time()
            measured = {
                "command": command,
                "locked_by": locked_by,
                "waited_s": started - waited,
                "started_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
                **project_git(),
                "cores": usable_cores(),
                "cpu_model": cpu_model(),
                "kernel": f"{platform.system()} {platform.release()}",
                "load_before": os.getloadavg()[0],
                "pairs": [],
            }
            for index, rate in enumerate(rates, 1):
                work = os.path.join(out, f"{index}-{rate}")
                pair = {"rate": rate, "work": work, "folders": {}, "sent": {}, "error": None}
                try:
                    pair["folders"], pair["sent"] = run_both(hosts, work, rate)
                except (RuntimeError, SystemExit, subprocess.SubprocessError, OSError) as exc:
                    pair["error"] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    for sweep_id in ("unshaped", "shaped") if rate else ("unshaped",):
                        folder = os.path.join(work, "volume", sweep_id)
                        if os.path.isdir(folder):
                            pair["folders"][sweep_id] = folder
                print(f"  rate {rate}: {pair['error'] or 'done'} ({time.time() - started:.0f} s)", file=sys.stderr)
                measured["pairs"].append(pair)
            measured["load_after"] = os.getloadavg()[0]
            measured["seconds"] = time.time() - started
            measured["ended_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    finally:
        hosts.remove()
    return measured


CONDITIONS = {"rate": "1gbit", "sent_bytes": 20e6, "step_ms": 30.0, "ladder_ms": 30.0, "share": 0.6}
"""What a shaped pair's figures must show: each node sent more than `sent_bytes` over the veth
unshaped; the shaped step grew by more than `step_ms`, the ladder's own DDP step by more than
`ladder_ms`, and exposed communication by more than `share` of the ladder's growth. (Until the
suite's checks on measured figures went through tests/chance.py, tests/test_two_hosts.py asserted
these on one pair at `rate`; now the two-node path runs there and its figures are judged here.)"""


def link_name(rate: str) -> str:
    """tc's `1gbit` as `1 Gbit/s`; a rate in other units as tc was given it."""
    match = re.fullmatch(r"([0-9.]+)([kmgt]?)bit", rate.lower())
    if not match:
        return rate
    return f"{match.group(1)} {match.group(2).upper()}bit/s" if match.group(2) else f"{match.group(1)} bit/s"


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.2f}"


def pct(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.0f} %"


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def wrap(text: str) -> str:
    """Prose at 100 columns; a list item's lines indented under it."""
    if not text or text.startswith(("|", "#")):
        return text
    indent = "  " if text.startswith("- ") else ""
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False, subsequent_indent=indent)


def half_width(term: dict) -> float | None:
    if term.get("ci_low_s") is None or term.get("ci_high_s") is None:
        return None
    return (term["ci_high_s"] - term["ci_low_s"]) / 2


def read_run(folder: str) -> dict:
    """One sweep's 2-node run: its breakdown (`ddpbench explain --json`) and its record's facts;
    `error` where either could not be read."""
    try:
        found = breakdown(folder)["mlp-ddp-n2"]
        with open(os.path.join(folder, "runs", "mlp-ddp-n2.json"), encoding="utf-8") as handle:
            record = json.load(handle)
    except (RuntimeError, KeyError, OSError, ValueError) as exc:
        return {"error": str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}
    return {
        "error": None,
        "status": record.get("status"),
        "step_s": found["step_s"],
        "exposed": as_term(found["causes"].get("exposed_comm")),
        # The page's window_vs_ladder: explain's check timed_vs_ablation (timed step less the ablation's).
        "window_vs_ladder": as_term(found["check"].get("timed_vs_ablation")),
        "blocks": found.get("rounds"),
        "hosts": ", ".join(f"rank {rank['rank']} {rank['hostname']}" for rank in record["ranks"]),
        "loads": [(rank["hostname"], rank["machine_load"]) for rank in record["ranks"] if rank.get("machine_load")],
    }


def term_growth(unshaped: dict, shaped: dict) -> tuple[float | None, float | None]:
    """A term's growth from the unshaped run to the shaped one, and its 95 % half-width (the two
    runs' in quadrature; None where either has no interval)."""
    if shaped["s_per_step"] is None or unshaped["s_per_step"] is None:
        return None, None
    widths = [half_width(shaped), half_width(unshaped)]
    return shaped["s_per_step"] - unshaped["s_per_step"], None if None in widths else math.hypot(*widths)


def growth(unshaped: dict, shaped: dict) -> dict:
    """What the shaped link added, per step: the step, exposed communication and window_vs_ladder
    (each ± its half-width), and the ladder's own DDP step (the step less window_vs_ladder)."""
    grew = {"step_s": shaped["step_s"] - unshaped["step_s"]}
    grew["exposed_s"], grew["exposed_hw"] = term_growth(unshaped["exposed"], shaped["exposed"])
    grew["window_vs_ladder_s"], grew["window_vs_ladder_hw"] = term_growth(
        unshaped["window_vs_ladder"], shaped["window_vs_ladder"]
    )
    grew["ladder_s"] = None if grew["window_vs_ladder_s"] is None else grew["step_s"] - grew["window_vs_ladder_s"]

    def share(of: float | None) -> float | None:
        return None if grew["exposed_s"] is None or of is None or of <= 0 else grew["exposed_s"] / of

    grew["share_of_step"] = share(grew["step_s"])
    grew["share_of_ladder"] = share(grew["ladder_s"])
    return grew


def exposed_cell(run: dict) -> str:
    term = run["exposed"]
    if term["ci_low_s"] is None or term["ci_high_s"] is None:
        return ms(term["s_per_step"])
    return f"{ms(term['s_per_step'])} [{ms(term['ci_low_s'])}, {ms(term['ci_high_s'])}]"


def verdict(pair: dict, test: dict) -> str:
    """CONDITIONS on this pair's figures, one by one."""
    grew, sent = pair["growth"], pair["sent"].get("unshaped") or []
    parts = [
        f"each node sent more than {test['sent_bytes'] / 1e6:.0f} MB unshaped: "
        f"{yes(bool(sent) and min(sent) > test['sent_bytes'])}",
        f"the step grew by more than {test['step_ms']:.0f} ms: {yes(grew['step_s'] * 1e3 > test['step_ms'])}",
    ]
    if grew["ladder_s"] is not None:
        parts.append(
            f"the ladder's DDP step by more than {test['ladder_ms']:.0f} ms: "
            f"{yes(grew['ladder_s'] * 1e3 > test['ladder_ms'])}"
        )
        if grew["exposed_s"] is not None:
            parts.append(
                f"exposed communication by more than {pct(test['share'])} of that: "
                f"{yes(grew['exposed_s'] > test['share'] * grew['ladder_s'])}"
            )
    return "; ".join(parts)


def header(measured: dict, analysed: dict) -> list[str]:
    runs = commit_of(measured.get("git_sha"), measured.get("git_dirty"))
    analysis = commit_of(analysed["git_sha"], analysed["git_dirty"])
    if runs == analysis and not analysed["analyse_only"]:
        commit = f"{runs}, runs and analysis"
    else:
        commit = f"the runs: {runs}; the analysis: {analysis}" + (
            " (`--analyse-only`)" if analysed["analyse_only"] else ""
        )
    waited = (
        "" if measured["locked_by"] != "this script" else f" after {measured['waited_s'] / 60:.1f} minutes of waiting"
    )
    took = (
        f"`{measured['command']}`, as root (measured in {measured['seconds'] / 60:.1f} minutes, holding "
        f"`flock {LOCK}` throughout, taken by {measured['locked_by']}{waited})"
    )
    if analysed["analyse_only"]:
        took += f"; this page: `{analysed['command']}`"
    return [
        f"- **Commit**: {commit}.",
        f"- **Machine**: {measured['cores']} cores ({measured['cpu_model']}), {measured['kernel']}, no GPU "
        f"used; 1-minute load average {measured['load_before']:.2f} before the runs (once the lock was "
        f"held), {measured['load_after']:.2f} after them; the runs ran from {measured['started_at']} to "
        f"{measured['ended_at']}; page written {analysed['date']}.",
        f"- **Command**: {took}.",
    ]


def page(measured: dict, analysed: dict) -> str:
    """The page, every figure from the runs `measured` names."""
    pairs, failed = [], []
    for index, pair in enumerate(measured["pairs"], 1):
        runs = {sweep_id: read_run(folder) for sweep_id, folder in pair["folders"].items()}
        problems = [f"{sweep_id}: {run['error']}" for sweep_id, run in runs.items() if run["error"]]
        problems += [
            f"{sweep_id}: status {run['status']}"
            for sweep_id, run in runs.items()
            if run.get("status") not in (None, "ok") and not run["error"]
        ]
        if pair.get("error"):
            problems.insert(0, pair["error"])
        if problems or set(runs) != {"unshaped", "shaped"}:
            failed.append(f"run {index} ({pair['rate']}): " + ("; ".join(problems) or "a sweep is missing"))
        usable = {k: r for k, r in runs.items() if not r["error"]}
        grew = growth(usable["unshaped"], usable["shaped"]) if set(usable) == {"unshaped", "shaped"} else None
        pairs.append({**pair, "index": index, "runs": usable, "growth": grew})
    test = CONDITIONS
    lines = [
        "# Two hosts in one machine: a 2-node run over a veth, unshaped and shaped",
        "",
        "Written by `benchmarks/two_hosts.py`, which ran the jobs below and analysed them; rerun it to",
        "measure again. What each term is: [explain](../explain.md).",
        "",
        *(wrap(line) for line in header(measured, analysed)),
        "",
        wrap(
            "The script writes the manifests with `ddpbench trainjob --nodes 2 --nproc-per-node 1 --suite smoke "
            "--strategies local,ddp`. For each rate it runs the one-node job (the `local` reference) in `node-0`, "
            "then the 2-node job's pods in `node-0` and `node-1` with the runtime's `PET_*` variables. It then "
            f"shapes both ends of the veth with `tc qdisc ... tbf rate R burst {BURST} latency {LATENCY}` and runs the "
            "2-node job again, against the same reference. The step and exposed communication columns are read "
            "from `ddpbench explain --json`, exposed communication with its 95 % interval from the ladder's paired "
            "blocks in brackets; the step, the timed window over its steps, has no interval in the breakdown."
        ),
        "",
        "| run | link | step (ms) | exposed communication (ms per step) | MB sent by node-0, node-1 during the "
        "2-node job | hosts of the ranks |",
        "|---|---|---|---|---|---|",
    ]
    for pair in pairs:
        for sweep_id, run in pair["runs"].items():
            link = "unshaped veth" if sweep_id == "unshaped" else f"tbf {link_name(pair['rate'])}"
            sent = ", ".join(f"{count / 1e6:.1f}" for count in pair["sent"].get(sweep_id, [])) or "n/a"
            lines.append(
                f"| {pair['index']} | {link} | {ms(run['step_s'])} | {exposed_cell(run)} | {sent} | {run['hosts']} |"
            )
    lines += ["", "What the shaped link added, per step:"]
    for pair in pairs:
        grew = pair["growth"]
        if grew is None:
            continue
        unshaped, shaped = pair["runs"]["unshaped"], pair["runs"]["shaped"]
        width = "" if grew["exposed_hw"] is None else f" ± {ms(grew['exposed_hw'])}"
        line = (
            f"- **{link_name(pair['rate'])}** (run {pair['index']}): the step grew by {ms(grew['step_s'])} ms "
            f"({ms(unshaped['step_s'])} to {ms(shaped['step_s'])}), and exposed communication by "
            f"{ms(grew['exposed_s'])}{width} ms, {pct(grew['share_of_step'])} of the step's growth."
        )
        if grew["ladder_s"] is not None:
            width = "" if grew["window_vs_ladder_hw"] is None else f" ± {ms(grew['window_vs_ladder_hw'])}"
            line += (
                f" `window_vs_ladder` changed by {ms(grew['window_vs_ladder_s'])}{width} ms, so the ladder's own "
                f"DDP step (the step less `window_vs_ladder`) grew by {ms(grew['ladder_s'])} ms, and exposed "
                f"communication's growth is {pct(grew['share_of_ladder'])} of that."
            )
        else:
            line += " `window_vs_ladder` was not measured in both runs: the ladder's own DDP step is not known."
        if test is not None:
            line += f" The conditions on these figures: {verdict(pair, test)}."
        lines.append(wrap(line))
    blocks = sorted({run["blocks"] for pair in pairs for run in pair["runs"].values() if run["blocks"]})
    lines.append(
        wrap(
            "- **One run is one sample**: each pair ran once. The ± figures and the brackets are 95 % intervals "
            + (
                f"from each run's {'/'.join(str(b) for b in blocks)} ladder blocks"
                if blocks
                else "from its ladder blocks"
            )
            + " (a growth's: the two runs' in quadrature); they do not show how far another run would land."
        )
    )
    lines.append("")
    unshaped = [pair["runs"]["unshaped"] for pair in pairs if "unshaped" in pair["runs"]]
    if unshaped:
        steps = " and ".join(ms(run["step_s"]) for run in unshaped)
        exposed = " and ".join(ms(run["exposed"]["s_per_step"]) for run in unshaped)
        lines.append(
            wrap(
                f"On the unshaped veth the step was {steps} ms, with {exposed} ms of exposed communication: the two "
                f"\"nodes\" share this machine's {measured['cores']} cores, which also copy every packet over the "
                "veth. The byte counts include every phase of the 2-node job, not only its timed steps."
            )
        )
        lines.append("")
    loads = []
    for pair in pairs:
        for sweep_id, run in pair["runs"].items():
            nodes = ", ".join(
                f"{host} {load['others_cores']:.2f} of {load['cores']}" + (" (busy)" if load["busy"] else "")
                for host, load in run["loads"]
            )
            if nodes:
                link = "unshaped" if sweep_id == "unshaped" else f"tbf {link_name(pair['rate'])}"
                loads.append(f"run {pair['index']} {link}: {nodes}")
    if loads:
        lines.append(
            wrap(
                "Cores that other processes used over each 2-node run's timed window, per node, as its record "
                "measured them (the other node's rank counts as another process): " + "; ".join(loads) + "."
            )
        )
        lines.append("")
    if failed:
        lines += [wrap("Not measured: " + "; ".join(failed) + "."), ""]
    lines.append(
        wrap(
            "`tests/test_two_hosts.py` runs the unshaped 2-node job (one rank per node) in `make test`: it "
            "checks that the run is ok with its replicas in sync, that its record names `node-0` and `node-1` "
            "as its ranks' hosts, the rendezvous that the runtime's `PET_MASTER_ADDR` and `PET_MASTER_PORT` "
            f"name, and gloo on `eth0`, that each node sent more than {test['sent_bytes'] / 1e6:.0f} MB over "
            "the veth, that the folder the pods share holds exactly the two jobs' records, and that the report "
            "groups the ranks by host. The shaped figures are judged on this page: the step grew by more than "
            f"{test['step_ms']:.0f} ms, the ladder's own DDP step by more than {test['ladder_ms']:.0f} ms, and "
            f"exposed communication by more than {pct(test['share'])} of the ladder's growth."
        )
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--rate",
        action="append",
        help="a shaped link's rate (tc tbf), one pair of runs each; repeat it or give a comma list (default 100mbit)",
    )
    parser.add_argument("--out", default=os.path.join(REPO, "results", "two-hosts"), help="where the runs go")
    parser.add_argument("--analyse-only", action="store_true", help="write the page from the runs already in --out")
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    command = command_line("two_hosts.py", argv)
    out = os.path.abspath(args.out)
    kept = os.path.join(out, MEASUREMENT)
    if args.analyse_only:
        if args.rate:
            parser.error("--analyse-only measures nothing: the rates are those of the runs in --out")
        try:
            with open(kept, encoding="utf-8") as handle:
                measured = json.load(handle)
        except OSError:
            parser.error(f"no {MEASUREMENT} in {out}: nothing to analyse")
    else:
        if os.path.exists(out) and os.listdir(out):
            parser.error(f"{out} already holds runs: use --analyse-only, or a new --out")
        os.makedirs(out, exist_ok=True)
        try:
            measured = measure(out, rates_of(args.rate), command)
        except Unavailable as exc:
            print(f"two_hosts: cannot run here: {exc}", file=sys.stderr)
            return 2
        with open(kept, "w", encoding="utf-8") as handle:
            json.dump(measured, handle, indent=1)
    analysed = analysis_facts(command, args.analyse_only)
    text = page(measured, analysed)
    print(text)
    print(f"records and breakdowns: {out}", file=sys.stderr)
    write_page(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
