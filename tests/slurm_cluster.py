"""A real single-host SLURM cluster for the tests: munged, slurmctld and two slurmd, all in a
temporary folder, torn down afterwards.

Two slurmd on one host give two SLURM nodes (node1, node2), each with half the cores, so that
`srun --nodes=2` starts two torchrun agents that meet in a c10d rendezvous exactly as on two
machines. Needs root and Debian's `slurm-wlm` and `munge` (`.ci/run` installs them); where it
cannot start, `start` says why and the tests that need it are skipped with that reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

NODES = ("node1", "node2")
PROGRAMS = ("munged", "mungekey", "setpriv", "slurmctld", "slurmd", "srun", "salloc", "sbatch", "sinfo", "scontrol")


class Unavailable(Exception):
    """SLURM cannot be started here; the message says why."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Cluster:
    folder: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> str:
        return os.path.join(self.folder, "slurm.conf")

    def env(self) -> dict[str, str]:
        """This environment, pointed at the test cluster (and outside any job)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = self.conf
        return env

    def logs(self) -> str:
        texts = []
        for name in sorted(os.listdir(self.folder)):
            if name.endswith(".log"):
                with open(os.path.join(self.folder, name), errors="replace") as handle:
                    texts.append(f"--- {name}\n" + "".join(handle.readlines()[-15:]))
        return "\n".join(texts)

    def stop(self, remove: bool = True) -> None:
        for process in reversed(self.processes):  # slurmd before slurmctld before munged
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if remove:
            shutil.rmtree(self.folder, ignore_errors=True)


def _config(folder: str, munge_socket: str, cores_per_node: int) -> str:
    ctld_port = _free_port()
    lines = [
        "ClusterName=ddpbench-test",
        f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={munge_socket}",
        "CredType=cred/munge",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={folder}/spool-%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdLogFile={folder}/slurmd-%n.log",
        "ReturnToService=2",
        "MpiDefault=none",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "KillWait=5",
    ]
    host = socket.gethostname().split(".")[0]
    lines += [
        f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} CPUs={cores_per_node}"
        for node in NODES
    ]
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def start(folder: str | None = None, timeout_s: float = 60.0) -> Cluster:
    """Start munged, slurmctld and the two slurmd in `folder` (default: a new one under /tmp,
    which user munge can reach, unlike pytest's private tmp folders); return when both nodes are
    idle. `Cluster.stop` ends them and removes the folder."""
    missing = [name for name in PROGRAMS if shutil.which(name) is None]
    if missing:
        raise Unavailable(f"SLURM is not installed ({', '.join(missing)} missing; apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        raise Unavailable("starting slurmd and munged needs root")
    folder = folder or tempfile.mkdtemp(prefix="ddpbench-slurm-")
    os.makedirs(folder, exist_ok=True)
    os.chmod(folder, 0o755)  # munged (user munge) must reach its socket inside
    munge_dir = os.path.join(folder, "munge")
    os.makedirs(munge_dir, mode=0o755)
    shutil.chown(munge_dir, "munge", "munge")
    as_munge = ["setpriv", "--reuid=munge", "--regid=munge", "--init-groups"]
    key = os.path.join(munge_dir, "munge.key")
    made = subprocess.run([*as_munge, "mungekey", "--create", f"--keyfile={key}"], capture_output=True, text=True)
    if made.returncode != 0:
        raise Unavailable(f"mungekey failed: {made.stderr.strip()}")
    socket_path = os.path.join(munge_dir, "munge.socket")
    cores = len(os.sched_getaffinity(0))
    with open(os.path.join(folder, "slurm.conf"), "w") as handle:
        handle.write(_config(folder, socket_path, max(1, cores // len(NODES))))
    for sub in ["state"] + [f"spool-{node}" for node in NODES]:
        os.makedirs(os.path.join(folder, sub))
    cluster = Cluster(folder)
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cluster.processes.append(
            subprocess.Popen(
                [
                    *as_munge,
                    "munged",
                    "--foreground",
                    f"--socket={socket_path}",
                    f"--key-file={key}",
                    f"--pid-file={munge_dir}/munged.pid",
                    f"--log-file={folder}/munged.log",
                    f"--seed-file={munge_dir}/munged.seed",
                ],
                **quiet,
            )
        )
        _wait_for(lambda: os.path.exists(socket_path), 15, "munged did not create its socket", cluster)
        cluster.processes.append(subprocess.Popen(["slurmctld", "-D", "-f", cluster.conf], **quiet))
        for node in NODES:
            cluster.processes.append(subprocess.Popen(["slurmd", "-D", "-f", cluster.conf, "-N", node], **quiet))

        def idle() -> bool:
            done = subprocess.run(
                ["sinfo", "--Node", "--noheader", "--format=%N %t"], env=cluster.env(), capture_output=True, text=True
            )
            states = dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)
            return all(states.get(node) == "idle" for node in NODES)

        _wait_for(idle, timeout_s, "the SLURM nodes did not become idle", cluster)
    except BaseException:
        cluster.stop(remove=False)  # its logs say why
        raise
    return cluster


def _wait_for(condition, timeout_s: float, message: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in cluster.processes):
            raise Unavailable(f"a SLURM daemon exited at start-up:\n{cluster.logs()}")
        if condition():
            return
        time.sleep(0.5)
    raise Unavailable(f"{message} within {timeout_s:.0f} s:\n{cluster.logs()}")
