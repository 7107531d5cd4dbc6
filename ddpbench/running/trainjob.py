"""Runs on Kubernetes: a sweep as Kubeflow Trainer v2 TrainJobs, one per node count. No torch.

A TrainJob (`trainer.kubeflow.org/v1alpha1`) names the `torch-distributed` runtime, which starts
`numNodes` pods of one container, `node`, and injects PET_NNODES, PET_NPROC_PER_NODE,
PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT into it. Every pod runs the same shell script:
the job's runs, one `ddpbench run` each, in the same order, each meeting its peers in a c10d
rendezvous on PET_MASTER_ADDR:PET_MASTER_PORT (pod 0). Global rank 0 writes each record to a
volume every pod mounts; the report is written from that volume once the jobs have ended.

Why one job per node count, not one job whose pods run the whole sweep: a TrainJob's node count is
fixed and Kueue admits all its pods at once, so one job sized for the largest count would hold
every node's GPUs while the one-node runs use one; pods of a smaller run would have to sit out
runs they take no part in, with no runtime variable to say so; and one failed run would fail the
whole sweep's job instead of one node count's.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from ddpbench.config.errors import SpecError

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "torch-distributed"
"""The ClusterTrainingRuntime Kubeflow Trainer ships for PyTorch (torchrun, PET_* variables)."""
CONTAINER = "node"
"""The runtime's one replicated job and its container: the controller injects PET_* there."""
RESERVED_VARIABLES = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT")
"""Set by the controller in every pod; a TrainJob that sets one is refused (and torchrun reads them)."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PATCH_MANAGER = "ddpbench"
"""Who owns the runtime patch that adds the volumes (runtimePatches are keyed by manager)."""
RESULTS_VOLUME = "results"
SHM_VOLUME = "dshm"
"""A memory-backed /dev/shm: a container gets 64 MB by default, too little for NCCL and loaders."""
NAME_LIMIT = 63
"""A TrainJob's name is an RFC 1035 label (the CRD's own rule): at most 63 characters."""


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how the pods run: what the manifests say beyond the runs themselves."""

    image: str
    """Container image with ddpbench (and torch) installed; the pods start `python -m ddpbench`."""
    volume_claim: str
    """PersistentVolumeClaim every pod mounts (ReadWriteMany): the records of every node land there."""
    mount_path: str
    """Where the pods mount it; the sweep's folder must be inside."""
    gpus_per_node: int | None
    """GPUs each pod asks for (None: a CPU sweep, no GPUs)."""
    gpu_resource: str = "nvidia.com/gpu"
    """The device plugin's resource name (amd.com/gpu on AMD)."""
    cpus_per_node: int | None = None
    """CPUs each pod asks for; None asks for none."""
    queue: str | None = None
    """Kueue LocalQueue that admits the jobs (the `kueue.x-k8s.io/queue-name` label)."""
    suspend: bool = False
    """Create the jobs suspended (spec.suspend): they start when resumed (Kueue does it on admission)."""
    namespace: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    """More variables for the pods, e.g. NCCL_SOCKET_IFNAME=eth0."""
    python: str = "python"
    """The image's Python, which the pods' script starts ddpbench with."""

    def __post_init__(self) -> None:
        if not self.image or not self.image.strip():
            raise SpecError("--image is needed: the container image the pods run, with ddpbench installed")
        if not self.volume_claim:
            raise SpecError("--volume-claim is needed: the PersistentVolumeClaim the pods share for the records")
        if not posixpath.isabs(self.mount_path):
            raise SpecError(f"--mount-path must be an absolute path in the pods; got {self.mount_path!r}")
        for name, _ in self.env:
            if name in RESERVED_VARIABLES:
                raise SpecError(f"--env {name}: the TrainJob controller sets {name} itself (reserved)")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise SpecError(f"--env {name!r} is not a variable name")


def parse_env(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise SpecError(f"--env takes NAME=VALUE; got {text!r}")
    return name, value


def check_out_on_volume(out: str, mount_path: str) -> None:
    """The sweep's folder must be on the shared volume: a pod's own disk is gone when it ends, and
    each node's records would land on a different one."""
    inside = posixpath.normpath(out)
    mount = posixpath.normpath(mount_path)
    if not posixpath.isabs(out) or not (inside == mount or inside.startswith(mount.rstrip("/") + "/")):
        raise SpecError(
            f"--out {out!r} is not on the shared volume: give a folder under --mount-path {mount_path!r}, "
            "where every pod sees the same files"
        )


def job_name(sweep_id: str, nodes: int) -> str:
    """`ddpbench-<sweep-id>-n<nodes>`, lower case, as the CRD's name rule wants, or SpecError."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"ddpbench-{sweep_id}-n{nodes}".lower())
    name = re.sub(r"-+", "-", name)
    if len(name) > NAME_LIMIT:
        raise SpecError(
            f"the TrainJob name {name!r} is {len(name)} characters; Kubernetes allows {NAME_LIMIT}: "
            "give a shorter --sweep-id"
        )
    return name


def multi_node_arguments(rdzv_id: str) -> list[str]:
    """What a pod adds to a run of several nodes: its place in the job, from the runtime's variables
    (the shell expands them in the pod), and a rendezvous id of the run's own, so that a pod still
    finishing the previous run never joins this one's rendezvous."""
    return [
        '--nproc "$PET_NPROC_PER_NODE"',
        '--nnodes "$PET_NNODES"',
        '--node-rank "$PET_NODE_RANK"',
        '--rdzv-endpoint "$PET_MASTER_ADDR:$PET_MASTER_PORT"',
        f"--rdzv-id {shlex.quote(rdzv_id)}",
    ]


def node_script(runs: Sequence[tuple[list[str], str | None]], nodes: int, nproc_per_node: int, python: str) -> str:
    """The shell script every pod of the job runs. `runs`: each run's `ddpbench run` arguments and,
    for a run of several nodes, its rendezvous id (None: a one-node run, its process count in the
    arguments). It refuses to start when the runtime's variables are not the job it was written
    for, and runs every run even after one failed (the other pods go on to the next run too),
    ending with exit code 1 if any did."""
    ddpbench = f"{shlex.quote(python)} -m ddpbench run"
    lines = [
        "set -u",
        f'if [ "${{PET_NNODES:-}}" != {nodes} ] || [ "${{PET_NPROC_PER_NODE:-}}" != {nproc_per_node} ]; then',
        f'  echo "ddpbench: these runs are planned for {nodes} node(s) x {nproc_per_node} process(es); the runtime '
        'set PET_NNODES=${PET_NNODES:-unset} PET_NPROC_PER_NODE=${PET_NPROC_PER_NODE:-unset}" >&2',
        "  exit 2",
        "fi",
        "failed=0",
    ]
    for arguments, rdzv_id in runs:
        words = [ddpbench, shlex.join(arguments), *(multi_node_arguments(rdzv_id) if rdzv_id else [])]
        lines.append(" ".join(words) + " || failed=1")
    lines.append('exit "$failed"')
    return "\n".join(lines) + "\n"


def resources(cluster: ClusterOptions) -> dict:
    limits: dict = {}
    requests: dict = {}
    if cluster.gpus_per_node:
        limits[cluster.gpu_resource] = cluster.gpus_per_node  # extended resources: the request equals the limit
    if cluster.cpus_per_node:
        requests["cpu"] = cluster.cpus_per_node
    return {key: value for key, value in (("limits", limits), ("requests", requests)) if value}


def volumes_patch(cluster: ClusterOptions) -> dict:
    """The runtime patch that gives the `node` pods the shared results volume and a larger /dev/shm."""
    pod_spec = {
        "volumes": [
            {"name": RESULTS_VOLUME, "persistentVolumeClaim": {"claimName": cluster.volume_claim}},
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
        ],
        "containers": [
            {
                "name": CONTAINER,
                "volumeMounts": [
                    {"name": RESULTS_VOLUME, "mountPath": cluster.mount_path},
                    {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
                ],
            }
        ],
    }
    job = {"name": CONTAINER, "template": {"spec": {"template": {"spec": pod_spec}}}}
    return {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}}


REPORT_ANNOTATION = "ddpbench/report-command"
"""Where each manifest says how its sweep's report is written once every job of it has ended."""


def trainjob_manifest(
    name: str, sweep_id: str, nodes: int, nproc_per_node: int, script: str, cluster: ClusterOptions, report: str
) -> dict:
    """One TrainJob: `nodes` pods of `nproc_per_node` processes each running `script`; `report` is
    the command that writes the sweep's report from the volume once every job has ended."""
    labels = {"app.kubernetes.io/name": "ddpbench", "app.kubernetes.io/part-of": name[: -len(f"-n{nodes}")]}
    if cluster.queue:
        labels[QUEUE_LABEL] = cluster.queue
    metadata: dict = {"name": name}
    if cluster.namespace:
        metadata["namespace"] = cluster.namespace
    metadata["labels"] = labels
    metadata["annotations"] = {"ddpbench/sweep-id": sweep_id, REPORT_ANNOTATION: report}
    trainer: dict = {
        "numNodes": nodes,
        "numProcPerNode": nproc_per_node,
        "image": cluster.image,
        "command": ["sh", "-c", script],
    }
    if cluster.env:
        trainer["env"] = [{"name": key, "value": value} for key, value in cluster.env]
    if resources(cluster):
        trainer["resourcesPerNode"] = resources(cluster)
    spec: dict = {}
    if cluster.suspend:
        spec["suspend"] = True
    spec["runtimeRef"] = {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": RUNTIME}
    spec["trainer"] = trainer
    spec["runtimePatches"] = [volumes_patch(cluster)]
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": spec}


class _Dumper(yaml.SafeDumper):
    """YAML as people write manifests: the pods' script as a literal block, not one escaped line."""


def _text(dumper: yaml.SafeDumper, text: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _text)


def manifest_yaml(manifest: dict) -> str:
    return yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, width=120)


def manifest_file(folder: str, name: str) -> str:
    return os.path.join(folder, f"{name}.yaml")
