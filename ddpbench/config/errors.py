"""The one error type of bad input, raised before any process starts and turned into exit code 2, and
what a command CI runs unattended says and exits with on an error it did not expect. No torch."""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
import traceback


class SpecError(ValueError):
    """A run was asked for with a value that is not allowed; the message says which and why."""


COULD_NOT_RUN = 70
"""What a command CI runs unattended (`bisect`, `ab`, the gate's wrapper) exits with on an error it
did not expect: never a verdict's code, so a crash is never read as an answer (70 is sysexits'
EX_SOFTWARE, a code no verdict of ddpbench uses)."""


def could_not_run(program: str, argv: list[str], error: BaseException, log_folder: str | None) -> int:
    """Say in one line that `program` (`ddpbench bisect`) could not run, keep the traceback in a
    log (in `log_folder`, else the temporary folder), and return COULD_NOT_RUN. Secrets are hidden
    in both, as everywhere ddpbench writes a command line down."""
    from ddpbench.config.secrets import redact_text

    text = redact_text(f"{program} {shlex.join(argv)}\n\n{''.join(traceback.format_exception(error))}")
    stem = program.split()[-1].rpartition(".")[2]
    name = f"{stem}-could-not-run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    log = None
    for folder in filter(None, (log_folder, tempfile.gettempdir())):
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
                handle.write(text)
            log = os.path.join(folder, name)
            break
        except OSError:
            continue
    said = (str(error).strip().splitlines() or [""])[0]
    where = f"the traceback is in {log}" if log else "no log could be written"
    line = f"{program}: could not run: {type(error).__name__}: {said} ({where})"
    print(redact_text(line), file=sys.stderr, flush=True)
    return COULD_NOT_RUN
