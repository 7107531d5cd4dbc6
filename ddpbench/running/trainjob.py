"""Runs on Kubernetes: a sweep as Kubeflow Trainer v2 TrainJobs, one per node count. No torch.

A TrainJob (`trainer.kubeflow.org/v1alpha1`) names the `torch-distributed` runtime, which starts
`numNodes` pods of one container, `node`, and injects PET_NNODES, PET_NPROC_PER_NODE,
PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT into it. Every pod runs the same shell script:
the job's runs, one `ddpbench run` each, in the same order, each meeting its peers in a c10d
rendezvous on PET_MASTER_ADDR:PET_MASTER_PORT (pod 0). Global rank 0 writes each record to a
volume every pod mounts; the report is written from that volume once the jobs have ended.

What keeps a multi-node figure honest on a real cluster:
- one pod per node: a required pod anti-affinity on the job's own pod label, so two pods of a
  2-node job never share a machine (its figure would be measured on one host), and CPU and memory
  requests by default, so the scheduler places each pod where its ranks fit;
- the node each rank ran on, in its record: the downward API puts the pod's `spec.nodeName` in
  DDPBENCH_NODE_NAME (a pod's own host name is the pod's, new in every job), which is the name the
  history's hosts go by and `--avoid-hosts` keeps the pods off, through a required node affinity on
  the nodes' `metadata.name`;
- a barrier before every run (`pod_barrier`): no pod starts run K before every pod has finished
  run K-1, failed or not, so one pod's failed run never leaves the pods a run apart;
- a run timeout by default, so every run ends on every pod and the barrier's wait is bounded;
- names checked against what JobSet makes from them: its pods are named
  `<name>-node-0-<pod index>-<5 random characters>`, and a pod name is a DNS label of 63
  characters at most.

Why one job per node count, not one job whose pods run the whole sweep: a TrainJob's node count is
fixed and Kueue admits all its pods at once, so one job sized for the largest count would hold
every node's GPUs while the one-node runs use one; pods of a smaller run would have to sit out
runs they take no part in, with no runtime variable to say so; and one failed run would fail the
whole sweep's job instead of one node count's.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ddpbench.config.errors import SpecError
from ddpbench.config.ids import check_id, short_hash
from ddpbench.host.placement import NODE_NAME_VARIABLE

API_VERSION = "trainer.kubeflow.org/v1alpha1"
MINIMUM_TRAINER = "v2.2.1"
"""The oldest Kubeflow Trainer release these manifests need: `spec.runtimePatches` (which adds the
results volume and /dev/shm) replaced `podTemplateOverrides` in v2.2.0 (kubeflow/trainer#3309), and
v2.2.1 lets a suspended TrainJob's runtimePatches change when it is resumed (#3489), which Kueue's
admission does. Checked against the CRD at kubeflow/trainer 8c0f505 (2026-08-21), which has
runtimePatches and no podTemplateOverrides; the v2.2.1 CRD itself is not checked here."""
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
"""A TrainJob's name is an RFC 1035 label (the CRD's own rule): at most 63 characters, and so are
the names JobSet gives its pods (and their host names), which it makes from it."""
POD_NAME_SUFFIX = "-abcde"
"""The random suffix of a pod's name; JobSet's own webhook checks the longest pod name with it."""
JOB_LABEL = "ddpbench/trainjob"
"""The pods' own label, the TrainJob's name: the anti-affinity keeps two pods of one job apart."""
HOST_TOPOLOGY = "kubernetes.io/hostname"
DEFAULT_RUN_TIMEOUT_S = 1800.0
"""A run of the GPU suite takes minutes; a run still going after 30 is hung, and the pods move on."""
BARRIER_SLACK_S = 600.0
"""Beyond the run timeout, how long a pod waits for the others at the barrier: their own timeout
ends their run, then the launcher's teardown, the record, a slow pod start (the first barrier)."""
MEMORY_PER_RANK_GI = 4
"""The default memory request per rank: a torch process with its CUDA context and data loader."""
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?")
"""A Kubernetes quantity, as a memory request takes it (512Mi, 16Gi, 2G)."""


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
    """The NVIDIA device plugin's resource name (a MIG profile: nvidia.com/mig-3g.40gb); ROCm is refused."""
    cpus_per_node: int | None = None
    """CPUs each pod asks for; None asks for none."""
    memory_per_node: str | None = None
    """Memory each pod asks for, a Kubernetes quantity (16Gi); None asks for none."""
    queue: str | None = None
    """Kueue LocalQueue that admits the jobs (the `kueue.x-k8s.io/queue-name` label)."""
    suspend: bool = False
    """Create the jobs suspended (spec.suspend): they start when resumed (Kueue does it on admission)."""
    namespace: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    """More variables for the pods, e.g. NCCL_SOCKET_IFNAME=eth0."""
    python: str = "python"
    """The image's Python, which the pods' script starts ddpbench with."""
    avoid_hosts: tuple[str, ...] = ()
    """Nodes the pods must not be placed on (`ddpbench history hosts` names them)."""

    def __post_init__(self) -> None:
        if not self.image or not self.image.strip():
            raise SpecError("--image is needed: the container image the pods run, with ddpbench installed")
        if not self.volume_claim:
            raise SpecError("--volume-claim is needed: the PersistentVolumeClaim the pods share for the records")
        if not posixpath.isabs(self.mount_path):
            raise SpecError(f"--mount-path must be an absolute path in the pods; got {self.mount_path!r}")
        if self.memory_per_node is not None and not QUANTITY.fullmatch(self.memory_per_node):
            raise SpecError(
                f"--memory-per-node takes a Kubernetes quantity such as 16Gi or 512Mi; got {self.memory_per_node!r}"
            )
        for name, _ in self.env:
            if name == NODE_NAME_VARIABLE:
                raise SpecError(f"--env {name}: ddpbench sets it in every pod to the pod's node (spec.nodeName)")
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


def longest_pod_name(name: str, nodes: int) -> str:
    """The longest name JobSet gives a pod of the job: `<name>-node-0-<last pod index>-<random>`."""
    return f"{name}-{CONTAINER}-0-{nodes - 1}{POD_NAME_SUFFIX}"


def job_name(sweep_id: str, nodes: int) -> str:
    """`ddpbench-<sweep-id>-n<nodes>`, lower case, as the CRD's name rule wants, short enough for
    the pod names JobSet makes from it, or SpecError. A sweep id that is not such a name already
    (upper case, `.`, `_`, `/`) gets a short hash of itself: `Nightly/1` and `nightly-1` would
    otherwise both be `ddpbench-nightly-1-n2`, and one job would replace the other."""
    words = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]+", "-", sweep_id.lower())).strip("-")
    if words != sweep_id:
        words = f"{words}-{short_hash(sweep_id)}".lstrip("-")
    name = f"ddpbench-{words}-n{nodes}"
    pod = longest_pod_name(name, nodes)
    if len(pod) > NAME_LIMIT:
        room = len(sweep_id) - (len(pod) - NAME_LIMIT)
        raise SpecError(
            f"the TrainJob name {name!r} is too long: JobSet names its pods after it ({pod!r}, {len(pod)} "
            f"characters) and Kubernetes allows {NAME_LIMIT}; give a --sweep-id of at most {max(room, 1)} characters"
        )
    return check_id("the TrainJob name", name, "--manifests")  # its manifest's file name


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


def barrier_lines(job: str, nodes: int, python: str, timeout_s: float) -> list[str]:
    """The script's `barrier K` (before run K): every pod waits there until all have arrived; a pod
    that is not there within the timeout stops the script (`pod_barrier` says which)."""
    command = (
        f'{shlex.quote(python)} -m ddpbench.running.pod_barrier --job {shlex.quote(job)} --barrier "$1" '
        f'--nodes {nodes} --node-rank "$PET_NODE_RANK" --host "$PET_MASTER_ADDR" '
        f'--port "$((PET_MASTER_PORT + 1))" --timeout {timeout_s:g}'
    )
    return ["barrier() {", f"  {command} || exit 1", "}"]


def node_script(
    runs: Sequence[tuple[list[str], str | None]],
    nodes: int,
    nproc_per_node: int,
    python: str,
    job: str = "",
    barrier_timeout_s: float = DEFAULT_RUN_TIMEOUT_S + BARRIER_SLACK_S,
) -> str:
    """The shell script every pod of the job runs. `runs`: each run's `ddpbench run` arguments and,
    for a run of several nodes, its rendezvous id (None: a one-node run, its process count in the
    arguments). It refuses to start when the runtime's variables are not the job it was written
    for, and runs every run even after one failed, ending with exit code 1 if any did. With
    several nodes, every run starts after a barrier (`pod_barrier`): no pod begins run K until
    every pod has finished run K-1, failed or not."""
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
    if nodes > 1:
        # pod 0 hosts each run's rendezvous store only if PET_MASTER_ADDR resolves to itself (dns_wait)
        lines.append(f'{shlex.quote(python)} -m ddpbench.running.dns_wait --host "$PET_MASTER_ADDR" || exit 1')
        lines += barrier_lines(job, nodes, python, barrier_timeout_s)
    for number, (arguments, rdzv_id) in enumerate(runs, 1):
        if nodes > 1:
            lines.append(f"barrier {number}")
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
    if cluster.memory_per_node:
        requests["memory"] = cluster.memory_per_node
    return {key: value for key, value in (("limits", limits), ("requests", requests)) if value}


def one_pod_per_node(name: str) -> dict:
    """A required anti-affinity to the job's own pods: no two on one machine."""
    term = {"labelSelector": {"matchLabels": {JOB_LABEL: name}}, "topologyKey": HOST_TOPOLOGY}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def not_on(hosts: tuple[str, ...]) -> dict:
    """A required node affinity that keeps the pods off these nodes (by node name: the name
    `spec.nodeName` gives, which the records keep)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": list(hosts)}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pods_patch(cluster: ClusterOptions, name: str, nodes: int) -> dict:
    """The runtime patch of the `node` pods: the shared results volume, a larger /dev/shm, the
    job's own label, with several nodes one pod per machine, and no pod on a node to avoid."""
    pod_spec: dict = {}
    affinity = {
        **(one_pod_per_node(name) if nodes > 1 else {}),
        **(not_on(cluster.avoid_hosts) if cluster.avoid_hosts else {}),
    }
    if affinity:
        pod_spec["affinity"] = affinity
    pod_spec |= {
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
    pod = {"metadata": {"labels": {JOB_LABEL: name}}, "spec": pod_spec}
    job = {"name": CONTAINER, "template": {"spec": {"template": pod}}}
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
    # The node the pod runs on, for every rank's record (ddpbench.host.placement).
    node = {"name": NODE_NAME_VARIABLE, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    trainer["env"] = [{"name": key, "value": value} for key, value in cluster.env] + [node]
    if resources(cluster):
        trainer["resourcesPerNode"] = resources(cluster)
    spec: dict = {}
    if cluster.suspend:
        spec["suspend"] = True
    spec["runtimeRef"] = {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": RUNTIME}
    spec["trainer"] = trainer
    spec["runtimePatches"] = [pods_patch(cluster, name, nodes)]
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": spec}


@functools.cache
def _dumper():
    """YAML as people write manifests: the pods' script as a literal block, not one escaped line.
    (yaml is imported here, not with the module: the command line starts without it.)"""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return yaml, Dumper


def manifest_yaml(manifest: dict) -> str:
    yaml, dumper = _dumper()
    return yaml.dump(manifest, Dumper=dumper, sort_keys=False, width=120)


def manifest_file(folder: str, name: str) -> str:
    return os.path.join(folder, f"{name}.yaml")
