"""Does `ddpbench history hosts` tell a slow host from chance, and from a slow rank? Measured over the
two hosts of benchmarks/two_hosts.py (network and UTS namespaces `node-0` and `node-1`, one rank each),
written as docs/measurements/recurring-hosts.md.

Every sweep is one 2-node TrainJob of two DDP runs (`--repeat 2`) of a small MLP
(tests/fixtures/planted_causes.py), its pods run as two_hosts runs them, added to a history store of
its scenario with `ddpbench history add`. Which node takes node rank 0 alternates from sweep to sweep,
so that a slow host and a slow rank are not confounded: torchrun's c10d rendezvous orders the agents
by their address, so each pod gets PET_LOCAL_ADDR `order-<node rank>.<its host>` (names its namespace's
/etc/hosts resolves to its own address) and the node taking node rank 0 is PET_MASTER_ADDR. The pods
also get DDPBENCH_NODE_NAME, as the manifests' downward API gives a pod its node's name.

The scenarios, each in a store of its own:
- null: --sweeps sweeps with nothing planted;
- planted: --before sweeps with nothing planted, then --sweeps sweeps in which node-1's pod (its agent
  and rank) runs in a cgroup v1 `cpu` group held to half a core (cpu.cfs_quota_us 1000 of 2000: see
  QUOTA_US), which ddpbench is not told about. The last null and the last planted sweep also run their 1-node
  job (two `local` runs, on node-0, outside the quota), so that the gate can compare them: the gate,
  given the planted store, must say node-1 is likely the host, not the code;
- slow rank: --sweeps sweeps of `slow_rank_one`, whose global rank 1 (node rank 1, on whichever node
  holds it) sleeps 10 ms in every training forward: no host may be named, rank 1 must be said to recur;
- realistic null: --histories synthetic histories drawn from the null sweeps themselves
  (benchmarks/recurring_null.py): a host named in at most 1 % of them.

The whole measurement holds /tmp/ddpbench-bench.lock (benchmarks/bench_lock.py). The sweeps, stores
and what `history hosts` and the gate said stay in --out (OUT/measurement.json); --analyse-only
writes the page from them again. Needs root, iproute2 and the cgroup v1 cpu controller.

    python benchmarks/recurring_hosts.py                          # the full measurement (see the page)
    python benchmarks/recurring_hosts.py --sweeps 2 --before 1 --histories 200 --out /tmp/rh --no-page
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import recurring_null  # noqa: E402
import two_hosts  # noqa: E402
from bench_lock import bench_lock  # noqa: E402
from measurement_page import add_page_options, analysis_facts, command_line, commit_of, write_page  # noqa: E402

from ddpbench.host.facts import cpu_model, project_git, usable_cores  # noqa: E402

PAGE = os.path.join(REPO, "docs", "measurements", "recurring-hosts.md")
MEASUREMENT = "measurement.json"
PLANTED_FILE = os.path.join(REPO, "tests", "fixtures", "planted_causes.py")
WORKLOADS = {"null": "steady_ranks", "planted": "steady_ranks", "slow-rank": "slow_rank_one"}
SCENARIOS = ("null", "planted", "slow-rank")
RUN_OPTIONS = ("--strategies", "local,ddp", "--repeat", "2", "--steps", "40", "--warmup", "8", "--batch-size", "256")
"""Two DDP runs a sweep (the gate names a culprit from two runs a side), 40 steps of which 8 warm-up:
enough rounds of the in-process ablation to name a straggler within one run; batches of 256 samples,
so that a rank's own compute, which a slow host slows, is a good part of its step (at the fixture's
32 the step is mostly gloo's, whose threads a slow host slows on both sides alike)."""
QUOTA_US, PERIOD_US = 1000, 2000
"""Half a core, in periods shorter than a step. With the usual 100 ms period the rank runs at full
speed for 50 ms and then stops for 50: a stall every tenth step or so, which doubled the mean step
here but which the in-process ablation's rounds (medians of their steps) passed over, so no run named
a straggler. In 2 ms periods every step is held back alike, as on a slow machine (1 ms is the least
quota the kernel takes)."""
CGROUP_ROOT = "/sys/fs/cgroup/cpu"
POD_TIMEOUT_S = 900.0
CHECK_ALPHA = 0.01
"""The rate the realistic null must stay under (the test's level)."""


class Unavailable(Exception):
    """The measurement cannot run here; the message says why."""


# --- the planted quota ----------------------------------------------------------------------------


class HalfCore:
    """A cgroup v1 `cpu` group held to half a core; processes started through `prefix` run in it."""

    def __init__(self, name: str):
        if not os.path.isfile(os.path.join(CGROUP_ROOT, "cpu.cfs_quota_us")):
            raise Unavailable(f"the cgroup v1 cpu controller is not mounted at {CGROUP_ROOT}")
        self.path = os.path.join(CGROUP_ROOT, name)
        try:
            os.makedirs(self.path)
            for file, value in (("cpu.cfs_period_us", PERIOD_US), ("cpu.cfs_quota_us", QUOTA_US)):
                with open(os.path.join(self.path, file), "w") as handle:
                    handle.write(str(value))
        except OSError as exc:
            self.remove()
            raise Unavailable(f"cannot make the cgroup {self.path}: {exc}") from None

    def prefix(self) -> list[str]:
        """A command's start that moves its own shell into the group, then runs the command there."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.path]

    def remove(self) -> None:
        """rmdir the group (its processes have ended; a moment for the kernel to notice)."""
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.2)


# --- one sweep ------------------------------------------------------------------------------------


def hosts_file_names() -> str:
    """The namespaces' /etc/hosts: each node's name and its two rendezvous addresses."""
    lines = ["127.0.0.1 localhost"]
    for address, name in zip(two_hosts.ADDRESSES, two_hosts.HOSTNAMES):
        lines.append(f"{address} {name} order-0.{name} order-1.{name}")
    return "\n".join(lines) + "\n"


def pods(hosts, command: list[str], env: dict, nodes: int, first: int, quota: HalfCore | None) -> list:
    """The job's pods at once: `nodes` of them (the first on node `first`), node-1's inside `quota`
    where given. Returns each pod's (exit code, output)."""
    started = []
    for node in [first, 1 - first] if nodes == 2 else [first]:
        node_rank = 0 if node == first else 1
        runtime = {
            "PET_NNODES": str(nodes),
            "PET_NPROC_PER_NODE": "1",
            "PET_NODE_RANK": str(node_rank),
            "PET_MASTER_ADDR": two_hosts.HOSTNAMES[first],
            "PET_MASTER_PORT": str(two_hosts.MASTER_PORT),
            # c10d orders the agents by this address: the node taking node rank 0 sorts first.
            "PET_LOCAL_ADDR": f"order-{node_rank}.{two_hosts.HOSTNAMES[node]}",
            "DDPBENCH_NODE_NAME": two_hosts.HOSTNAMES[node],
        }
        prefix = quota.prefix() if quota is not None and node == 1 else []
        started.append(
            subprocess.Popen(
                [*prefix, *hosts.pod_command(node, command)],
                env={**env, **runtime},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    results = []
    for pod in started:
        try:
            output, _ = pod.communicate(timeout=POD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(pod.pid, signal.SIGKILL)
            output, _ = pod.communicate()
        results.append((pod.returncode, output))
    return results


def ddpbench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO, "DDPBENCH_BUSY_WARNING": "off"}
    return subprocess.run([sys.executable, "-m", "ddpbench", *args], capture_output=True, text=True, env=env)


def one_sweep(hosts, work: str, scenario: str, number: int, planted: bool, local: bool, quota, store: str) -> dict:
    """Sweep `number` of a scenario: its 2-node job (and its 1-node job where `local`), then `history
    add` to the scenario's store."""
    sweep_id = f"{scenario}-{number:02d}"
    first = number % 2
    folder = os.path.join(work, "manifests", sweep_id)
    os.makedirs(folder, exist_ok=True)
    out = os.path.join(work, "volume")
    workload = f"{PLANTED_FILE}:{WORKLOADS[scenario]}"
    jobs = two_hosts.manifests(folder, sweep_id, out, *RUN_OPTIONS, "--workloads", workload)
    done = {"sweep": sweep_id, "first": two_hosts.HOSTNAMES[first], "planted": planted, "error": None}
    started = time.time()
    try:
        if local:
            trainer = jobs[1]["spec"]["trainer"]
            for code, output in pods(hosts, trainer["command"], two_hosts.pod_environment(jobs[1]), 1, 0, None):
                if code != 0:
                    raise RuntimeError(f"the 1-node job exited {code}: {output.strip().splitlines()[-1:]}")
        trainer = jobs[2]["spec"]["trainer"]
        env = two_hosts.pod_environment(jobs[2])
        for code, output in pods(hosts, trainer["command"], env, 2, first, quota if planted else None):
            if code != 0:
                raise RuntimeError(f"a pod of the 2-node job exited {code}: {output.strip().splitlines()[-1:]}")
    except RuntimeError as exc:
        done["error"] = str(exc)
    done["seconds"] = time.time() - started
    done["folder"] = os.path.join(out, sweep_id)
    added = ddpbench("history", "add", done["folder"], "--store", store)
    if added.returncode != 0:
        done["error"] = (done["error"] or "") + f" history add: {added.stderr.strip()}"
    return done


# --- the measurement ------------------------------------------------------------------------------


def plan(sweeps: int, before: int) -> list[tuple[str, int, bool, bool]]:
    """(scenario, number, planted, with the 1-node job) of every sweep, in the order they run."""
    runs = [("null", n, False, n == sweeps - 1) for n in range(sweeps)]
    total = before + sweeps
    runs += [("planted", n, n >= before, n == total - 1) for n in range(total)]
    runs += [("slow-rank", n, False, False) for n in range(sweeps)]
    return runs


def measure(out: str, sweeps: int, before: int, command: str) -> dict:
    for program in ("ip", "unshare"):
        if shutil.which(program) is None:
            raise Unavailable(f"needs `{program}` and root")
    waited = time.time()
    stores = {scenario: f"sqlite:///{os.path.join(out, scenario + '.sqlite')}" for scenario in SCENARIOS}
    try:
        hosts = two_hosts.start(f"r{os.getpid()}")
    except two_hosts.Unavailable as exc:
        raise Unavailable(str(exc)) from None
    quota = None
    try:
        for namespace in hosts.namespaces:
            with open(hosts.hosts_file(namespace), "w") as handle:
                handle.write(hosts_file_names())
        quota = HalfCore(f"ddpbench-recurring-{os.getpid()}")
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
                "options": list(RUN_OPTIONS),
                "quota": [QUOTA_US, PERIOD_US],
                "stores": stores,
                "sweeps": {scenario: [] for scenario in SCENARIOS},
            }
            for scenario, number, planted, local in plan(sweeps, before):
                done = one_sweep(hosts, out, scenario, number, planted, local, quota, stores[scenario])
                measured["sweeps"][scenario].append(done)
                print(
                    f"  {done['sweep']} (node rank 0 on {done['first']}{', planted' if planted else ''}): "
                    f"{done['error'] or 'done'} ({done['seconds']:.0f} s)",
                    file=sys.stderr,
                )
            measured["load_after"] = os.getloadavg()[0]
            measured["seconds"] = time.time() - started
            measured["ended_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    finally:
        if quota is not None:
            quota.remove()
        hosts.remove()
    return measured


# --- what ddpbench says of them -------------------------------------------------------------------


def hosts_answer(store: str, json_file: str) -> dict:
    done = ddpbench("history", "hosts", "--store", store, "--json-file", json_file)
    if done.returncode != 0:
        return {"error": done.stderr.strip()}
    with open(json_file, encoding="utf-8") as handle:
        return json.load(handle)


def gate_answer(measured: dict, out: str) -> dict:
    """The gate on the last planted sweep against the last null sweep, given the planted store."""
    baseline = next((s for s in reversed(measured["sweeps"]["null"]) if not s["error"]), None)
    candidate = next((s for s in reversed(measured["sweeps"]["planted"]) if s["planted"] and not s["error"]), None)
    if baseline is None or candidate is None:
        return {"error": "no ok null and planted sweep to gate"}
    path = os.path.join(out, "gate.json")
    done = ddpbench(
        "gate", "--baseline", baseline["folder"], "--candidate", candidate["folder"],
        "--store", measured["stores"]["planted"], "--json-file", path,
    )  # fmt: skip
    found = {"baseline": baseline["sweep"], "candidate": candidate["sweep"], "exit_code": done.returncode}
    if not os.path.exists(path):
        return {**found, "error": done.stderr.strip()}
    with open(path, encoding="utf-8") as handle:
        verdict = json.load(handle)
    lines = [line for line in done.stdout.splitlines() if "likely the host" in line]
    return {**found, "suspect_hosts": verdict.get("suspect_hosts", []), "lines": lines}


def realistic_null(measured: dict, histories: int) -> dict:
    from ddpbench.history import open_store
    from ddpbench.history.culprits import DEFAULT_LAST, sweep_outcomes

    os.environ["DDPBENCH_OTAVA_PYTHON"] = "/nonexistent/python"  # no change points are needed here
    with open_store(measured["stores"]["null"], create=False) as store:
        outcomes = sweep_outcomes(store.ranks())
    lengths = sorted({len(outcomes), DEFAULT_LAST})
    rates = [
        recurring_null.synthetic_rate(outcomes, length, histories, layout, seed=index)
        for index, (length, layout) in enumerate((n, layout) for n in lengths for layout in recurring_null.LAYOUTS)
    ]
    return {"frequencies": recurring_null.culprit_frequencies(outcomes), "rates": rates}


def analyse(measured: dict, out: str, histories: int) -> dict:
    answers = {scenario: hosts_answer(measured["stores"][scenario], os.path.join(out, f"{scenario}-hosts.json"))
               for scenario in SCENARIOS}  # fmt: skip
    return {
        "hosts": answers,
        "gate": gate_answer(measured, out),
        "null": realistic_null(measured, histories),
        "layouts": layouts(measured),
    }


def layouts(measured: dict) -> dict:
    """From the records: which node held global rank 0 in each sweep's runs (the alternation)."""
    from ddpbench.records.store import read_records

    found = {}
    for scenario, sweeps in measured["sweeps"].items():
        counts: dict[str, int] = {}
        for sweep in sweeps:
            if not os.path.isdir(sweep["folder"]):
                continue
            for _, record in read_records(sweep["folder"])[0]:
                if len(record.ranks) > 1:
                    zero = next(rank for rank in record.ranks if rank.rank == 0)
                    host = zero.node_name or zero.hostname or "not recorded"
                    counts[host] = counts.get(host, 0) + 1
        found[scenario] = counts
    return found


# --- the page ------------------------------------------------------------------------------------


def checks(measured: dict, analysed: dict, sweeps_needed: int) -> list[tuple[str, bool, str]]:
    """Each of the page's claims: (what, holds, what was seen)."""
    hosts, gate, null = analysed["hosts"], analysed["gate"], analysed["null"]
    planted = hosts.get("planted", {})
    named = planted.get("named", {}).get("host", [])
    node_1 = next((u for u in planted.get("families", {}).get("host", []) if u["name"] == "node-1"), None)
    planted_sweeps = sum(s["planted"] and not s["error"] for s in measured["sweeps"]["planted"])
    found = [
        (
            f"planted: node-1 named, its count and its lead ({planted_sweeps} sweeps at half a core)",
            named == ["node-1"] and node_1 is not None and node_1["lead_s"] is not None,
            f"named {named or 'none'}"
            + (f"; node-1 slowest in {node_1['votes']} of {node_1['sweeps']}" if node_1 else ""),
        ),
        (
            "planted: the gate says node-1 is likely the host, not the code",
            any(one.get("name") == "node-1" for one in gate.get("suspect_hosts", [])),
            gate.get("error")
            or f"{len(gate.get('suspect_hosts', []))} suspect host(s), exit code {gate.get('exit_code')}",
        ),
    ]
    slow = hosts.get("slow-rank", {})
    found.append(
        (
            "slow rank: no host named, rank 1 said to recur",
            not slow.get("named", {}).get("host") and "1" in slow.get("ranks_beyond_chance", []),
            f"hosts named {slow.get('named', {}).get('host') or 'none'}; ranks beyond chance "
            f"{slow.get('ranks_beyond_chance') or 'none'}",
        )
    )
    quiet = hosts.get("null", {})
    found.append(("null: no host named", not quiet.get("named", {}).get("host") and "error" not in quiet,
                  f"hosts named {quiet.get('named', {}).get('host') or 'none'}"))  # fmt: skip
    for rate in null["rates"]:
        if rate.get("layout") == "alternating" and rate.get("histories"):
            found.append(
                (
                    f"realistic null, {rate['length']} sweeps: a host named in at most 1 % of histories",
                    rate["rate"] <= CHECK_ALPHA,
                    f"{rate['named_host']} of {rate['histories']} ({100 * rate['rate']:.2f} %, at most "
                    f"{100 * rate['upper_95']:.2f} % at 95 %)",
                )
            )
    counts = [len([s for s in measured["sweeps"][k] if not s["error"]]) for k in ("null", "slow-rank")]
    unplanted = len([s for s in measured["sweeps"]["planted"] if not s["error"] and not s["planted"]])
    found.append(
        (
            f"at least {sweeps_needed} sweeps in each scenario",
            min(counts + [planted_sweeps]) >= sweeps_needed,
            f"null {counts[0]}, planted {planted_sweeps} (+ {unplanted} unplanted before them), slow rank {counts[1]}",
        )
    )
    return found


def page(measured: dict, analysed: dict, facts: dict) -> str:
    commit = commit_of(measured.get("git_sha"), measured.get("git_dirty"))
    found = checks(measured, analysed, 15)
    lines = [
        "# Recurring hosts: a slow host told from chance and from a slow rank",
        "",
        "Written by `benchmarks/recurring_hosts.py`; do not edit by hand. What is counted and the test: "
        "[the history's hosts](../gate.md#slow-hosts-the-historys-hosts).",
        "",
        f"- **Command**: `{measured['command']}`, at commit {commit}, {measured['started_at']} to "
        f"{measured.get('ended_at', '?')} ({measured.get('seconds', 0) / 60:.0f} min), lock held by "
        f"{measured['locked_by']}; page written by `{facts['command']}` on {facts['date']}, the analysis (`history "
        f"hosts`, the gate, the synthetic histories) at commit {commit_of(facts['git_sha'], facts['git_dirty'])}.",
        f"- **Machine**: {measured['cpu_model']}, {measured['cores']} cores, {measured['kernel']}; load "
        f"{measured['load_before']:.2f} before, {measured.get('load_after', 0):.2f} after.",
        "- **Sweeps**: two namespaces `node-0` and `node-1` joined by a veth, one rank each (gloo), each sweep "
        f"one 2-node TrainJob's pods ({' '.join(measured['options'])}) of tests/fixtures/planted_causes.py; "
        "node rank 0 alternates between the nodes from sweep to sweep. Global rank 0 ran on: "
        + "; ".join(
            f"{scenario} {', '.join(f'{host} {n} runs' for host, n in sorted(counts.items()))}"
            for scenario, counts in analysed["layouts"].items()
        )
        + ".",
        f"- **Planted**: node-1's pod in a cgroup v1 cpu group at {measured['quota'][0]} of {measured['quota'][1]} "
        "us (half a core, held back in every step), ddpbench not told. **Slow rank**: global rank 1 sleeps 10 ms "
        "in every training forward, on whichever node holds it.",
        "",
        "| check | holds | seen |",
        "|---|---|---|",
        *[f"| {what} | {'yes' if holds else '**no**'} | {seen} |" for what, holds, seen in found],
        "",
    ]
    for scenario in SCENARIOS:
        answer = analysed["hosts"].get(scenario, {})
        failed = [s["sweep"] + ": " + s["error"] for s in measured["sweeps"][scenario] if s["error"]]
        said = answer.get("lines", [answer.get("error", "")])
        lines += [f"## {scenario}: `ddpbench history hosts`", "", "```", *said, "```", ""]
        if failed:
            lines += ["Sweeps that failed: " + "; ".join(failed), ""]
    gate = analysed["gate"]
    lines += ["## The gate on a planted sweep", "",
              f"`ddpbench gate --baseline {gate.get('baseline')} --candidate {gate.get('candidate')} --store "
              "planted.sqlite` (exit code " + str(gate.get("exit_code")) + "):", "", "```",
              *(gate.get("lines") or [gate.get("error") or "no line about a host"]), "```", ""]  # fmt: skip
    null = analysed["null"]
    frequencies = null["frequencies"]
    lines += [
        "## The realistic null",
        "",
        f"The {frequencies['sweeps']} null sweeps' own culprits: "
        + "".join(f"rank {rank} in {n}, " for rank, n in sorted(frequencies["by_rank"].items()))
        + f"no rank beyond noise in {frequencies['no_vote']}. Synthetic histories draw whole null sweeps at random "
        "(their rank bias and the agreement of their runs kept) and place their ranks on the hosts again "
        "(benchmarks/recurring_null.py); each is judged as `history hosts` judges a store.",
        "",
        "| sweeps | layout | histories | a host named | rate (95 % upper bound) | a rank recurs "
        "| host goes with a rank |",
        "|---:|---|---:|---:|---|---:|---:|",
        *[
            f"| {r['length']} | {r['layout']} | {r['histories']} | {r.get('named_host', 0)} | "
            f"{100 * r.get('rate', 0):.2f} % ({100 * r.get('upper_95', 1):.2f} %) | {r.get('rank_recurs', 0)} | "
            f"{r.get('host_goes_with_rank', 0)} |"
            for r in null["rates"]
        ],
        "",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweeps", type=int, default=15, help="sweeps of each scenario (default 15)")
    parser.add_argument("--before", type=int, default=3, help="unplanted sweeps before the planted ones (default 3)")
    parser.add_argument("--histories", type=int, default=2000, help="synthetic histories per case (default 2000)")
    parser.add_argument("--out", default=os.path.join(REPO, "results", "recurring-hosts"), help="where the runs go")
    parser.add_argument("--analyse-only", action="store_true", help="write the page from the runs already in --out")
    add_page_options(parser, PAGE)
    args = parser.parse_args(argv)
    if args.sweeps < 1 or args.before < 0 or args.histories < 1:
        parser.error("--sweeps and --histories take 1 or more, --before 0 or more")
    command = command_line("recurring_hosts.py", argv)
    out = os.path.abspath(args.out)
    kept = os.path.join(out, MEASUREMENT)
    if args.analyse_only:
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
            measured = measure(out, args.sweeps, args.before, command)
        except Unavailable as exc:
            print(f"recurring_hosts: cannot run here: {exc}", file=sys.stderr)
            return 2
        with open(kept, "w", encoding="utf-8") as handle:
            json.dump(measured, handle, indent=1)
    analysed = analyse(measured, out, args.histories)
    with open(os.path.join(out, "analysis.json"), "w", encoding="utf-8") as handle:
        json.dump(analysed, handle, indent=1)
    text = page(measured, analysed, analysis_facts(command, args.analyse_only))
    print(text)
    print(f"sweeps, stores and answers: {out}", file=sys.stderr)
    write_page(args, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
