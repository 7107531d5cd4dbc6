"""Wait, a bounded time, until a host name resolves: the first line a pod of a multi-node TrainJob
runs (`ddpbench trainjob` writes it into the pods' script). No torch: the standard library only.

Why: torchrun's c10d rendezvous decides whether this node hosts the store by resolving the
endpoint's host and comparing it with its own addresses. On Kubernetes that host is PET_MASTER_ADDR,
pod 0's name under the job's headless service, whose DNS record appears only some seconds after the
pod starts. Pod 0 asking too early does not find itself, hosts no store, and the run's rendezvous
fails on every pod, with no retry. Waiting here until the name resolves (every pod: the others dial
it too) removes the race; a name that never resolves stops the script with one line saying so.

    python -m ddpbench.running.dns_wait --host PET_MASTER_ADDR --timeout SECONDS
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Callable

RETRY_S = 2.0
DEFAULT_TIMEOUT_S = 300.0
"""Five minutes: a headless service's record takes seconds; longer means the service is missing."""


def wait_for_name(
    host: str,
    timeout_s: float,
    resolve: Callable[[str], object] = lambda host: socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, int, str]:
    """(resolved, attempts, the last resolver error) after trying every RETRY_S seconds for at most
    `timeout_s` seconds."""
    deadline = clock() + timeout_s
    attempts, last_error = 0, ""
    while True:
        attempts += 1
        try:
            resolve(host)
            return True, attempts, ""
        except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
            last_error = str(exc)
        left = deadline - clock()
        if left <= 0:
            return False, attempts, last_error
        sleep(min(RETRY_S, left))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddpbench.running.dns_wait", description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="the name to wait for (PET_MASTER_ADDR)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds to wait at most")
    args = parser.parse_args(argv)
    resolved, attempts, error = wait_for_name(args.host, args.timeout)
    if resolved:
        if attempts > 1:
            print(f"ddpbench: {args.host} resolves (after {attempts} tries)", file=sys.stderr)
        return 0
    print(
        f"ddpbench: {args.host!r} (PET_MASTER_ADDR, pod 0's name under the job's headless service) did not resolve "
        f"within {args.timeout:g} s ({attempts} tries; last: {error}): no run can meet on it; check that the "
        "TrainJob's JobSet has its headless service (kubectl get svc) and the cluster's DNS",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
