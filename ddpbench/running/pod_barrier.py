"""The barrier the pods of a multi-node TrainJob pass before each run: no pod starts run K until
every pod has finished run K-1, failed or not (`ddpbench trainjob` writes one call before each run
into the pods' script). No torch: plain TCP, the standard library only.

Why a barrier: every pod runs the job's runs in turn, each a torchrun whose c10d rendezvous is on
pod 0 (PET_MASTER_ADDR:PET_MASTER_PORT). Without one, a pod whose run failed early moves on to the
next run and dials pod 0's port while pod 0 is still inside the previous run: it meets that run's
store, not the next run's, and from then on the pods can be a run apart, each run failing for want
of its peers. A port per run would only move the problem (a pod that finished early waits on the
next port with a connect timeout shorter than another pod's run); one TrainJob per run would pay
a pod start and an admission per run and let two runs share a node.

Pod 0 listens on PET_MASTER_PORT + 1 (its rendezvous port stays torchrun's) and answers `go` once
every other pod has said it reached this barrier; the others dial it until it answers, so the
order in which pods arrive does not matter. A pod that asks about a barrier already passed is told
`go` at once (it lost its connection after pod 0 had answered). Each side waits at most
`--timeout` seconds: the run timeout plus slack, since every run ends by then on every pod, and a
pod that has not arrived by then is gone; the script then stops with exit code 1 and says which
pods never arrived.

    python -m ddpbench.running.pod_barrier --job NAME --barrier K --nodes N --node-rank R \\
        --host PET_MASTER_ADDR --port PORT --timeout SECONDS
"""

from __future__ import annotations

import argparse
import selectors
import socket
import sys
import time

GREETING = "ddpbench-barrier"
RETRY_S = 0.5
"""How often a pod dials pod 0 again while pod 0 is not listening yet (still in its run)."""


def _line(job: str, barrier: int, node_rank: int) -> bytes:
    return f"{GREETING} {job} {barrier} {node_rank}\n".encode()


def _parse(line: bytes) -> tuple[str, int, int] | None:
    words = line.decode(errors="replace").split()
    if len(words) != 4 or words[0] != GREETING:
        return None
    try:
        return words[1], int(words[2]), int(words[3])
    except ValueError:
        return None


def serve(job: str, barrier: int, nodes: int, port: int, timeout_s: float, host: str = "") -> list[int]:
    """Pod 0's side: wait for every other pod to reach `barrier`, then tell them all to go.
    Returns the pods that never arrived (empty: the barrier passed)."""
    deadline = time.monotonic() + timeout_s
    waiting: dict[int, socket.socket] = {}
    with _listen(host, port) as server, selectors.DefaultSelector() as selector:
        server.setblocking(False)
        selector.register(server, selectors.EVENT_READ)
        pending: dict[socket.socket, bytes] = {}
        while len(waiting) < nodes - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in selector.select(timeout=min(left, 1.0)):
                if key.fileobj is server:
                    connection, _ = server.accept()
                    connection.setblocking(False)
                    pending[connection] = b""
                    selector.register(connection, selectors.EVENT_READ)
                    continue
                connection = key.fileobj
                try:
                    data = connection.recv(256)
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(connection)
                    pending.pop(connection, None)
                    connection.close()
                    continue
                pending[connection] += data
                if b"\n" not in pending[connection]:
                    continue
                said = _parse(pending.pop(connection).split(b"\n")[0])
                selector.unregister(connection)
                if said is None or said[0] != job or not 0 < said[2] < nodes:
                    connection.close()  # not one of this job's pods
                elif said[1] < barrier:
                    _answer(connection)  # a barrier passed already: it lost its answer
                elif said[1] > barrier:
                    connection.close()  # cannot happen while pod 0 is behind: it waits for pod 0
                else:
                    old = waiting.pop(said[2], None)
                    if old is not None:
                        old.close()  # the same pod dialled again: its newer connection counts
                    waiting[said[2]] = connection
        for connection in pending:
            connection.close()
    missing = [rank for rank in range(1, nodes) if rank not in waiting]
    for connection in waiting.values():
        if missing:
            connection.close()
        else:
            _answer(connection)
    return missing


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on every address of the pod, IPv6 and IPv4 where it can (a cluster may
    give pods either), else IPv4 only."""
    if not host and socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        except OSError:
            pass  # IPv6 turned off in this network namespace
    return socket.create_server((host, port))


def _answer(connection: socket.socket) -> None:
    try:
        connection.setblocking(True)
        connection.sendall(b"go\n")
    except OSError:
        pass  # it dials again, and is told go as a barrier passed
    finally:
        connection.close()


def wait(job: str, barrier: int, node_rank: int, host: str, port: int, timeout_s: float) -> bool:
    """Another pod's side: dial pod 0 until it says go. False if it never did within the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=min(5.0, max(0.1, deadline - time.monotonic()))) as s:
                s.sendall(_line(job, barrier, node_rank))
                s.settimeout(max(0.1, deadline - time.monotonic()))
                if s.makefile("rb").readline().strip() == b"go":
                    return True
        except OSError:
            pass  # not listening yet (pod 0 is still in its run), not resolvable yet, or closed
        time.sleep(RETRY_S)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpbench.running.pod_barrier", description=__doc__.split("\n")[0])
    parser.add_argument("--job", required=True, help="the TrainJob's name: pods of other jobs are not counted")
    parser.add_argument("--barrier", type=int, required=True, help="the run about to start, from 1")
    parser.add_argument("--nodes", type=int, required=True, help="the job's pods (PET_NNODES)")
    parser.add_argument("--node-rank", type=int, required=True, help="this pod's (PET_NODE_RANK)")
    parser.add_argument("--host", required=True, help="pod 0's address (PET_MASTER_ADDR)")
    parser.add_argument("--port", type=int, required=True, help="the barrier's port on pod 0")
    parser.add_argument("--timeout", type=float, required=True, help="seconds to wait for every pod")
    args = parser.parse_args(argv)
    if args.nodes < 2:
        return 0
    if args.node_rank == 0:
        missing = serve(args.job, args.barrier, args.nodes, args.port, args.timeout)
        if missing:
            print(
                f"ddpbench: pods {', '.join(map(str, missing))} of {args.job} did not reach run {args.barrier} "
                f"within {args.timeout:g} s; the remaining runs are not started",
                file=sys.stderr,
            )
            return 1
        return 0
    if wait(args.job, args.barrier, args.node_rank, args.host, args.port, args.timeout):
        return 0
    print(
        f"ddpbench: pod 0 of {args.job} ({args.host}:{args.port}) did not start run {args.barrier} within "
        f"{args.timeout:g} s; the remaining runs are not started",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
