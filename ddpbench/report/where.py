"""Where a sweep's report goes: `reports/<sweep-id>/`, the id's sub-folders included
(`reports/nightly/2026-12-01/index.html`), never over the report of another sweep. No torch.

Two sweeps may share an id under two `--out` folders (`a/nightly` and `b/nightly`), and a nested
id's last part may be another's (`nightly/2026-12-01`, `weekly/2026-12-01`). Every report says
which sweep folder it was written from (a `<meta>` line); where the default place already holds a
report of another sweep, or one that does not say, the report goes into the sweep's own folder
(`<sweep>/report/index.html`) and the command says where it went and why."""

from __future__ import annotations

import json
import os
import re

from ddpbench.config.ids import stored_id_problem

REPORTS = "reports"
OWNER_META = "ddpbench-sweep-dir"
"""The report's `<meta name=... content=...>`: the absolute sweep folder it was written from."""
OWN_FOLDER = "report"
"""The report's folder inside the sweep, where the default place belongs to another sweep."""


def _ends_with(folder: str, sweep_id: object) -> bool:
    if not isinstance(sweep_id, str) or stored_id_problem(sweep_id, nested=True):
        return False
    return folder == sweep_id or folder.endswith(os.sep + sweep_id.replace("/", os.sep))


def sweep_id_of(sweep_dir: str, given: str | None = None) -> str:
    """The sweep's id, sub-folders included: `given` (report --sweep-id, for a sweep whose folder
    has no manifest, a TrainJob's), else as the manifest keeps it, where the folder ends with it;
    else the folder's name (a sweep moved, or one from before)."""
    folder = os.path.normpath(sweep_dir)
    if given is not None:
        return given
    try:
        with open(os.path.join(sweep_dir, "manifest.json"), encoding="utf-8") as handle:
            stored = json.load(handle).get("sweep_id")
    except (OSError, ValueError, AttributeError):
        stored = None
    return stored if _ends_with(folder, stored) else os.path.basename(folder)


def check_given_id(sweep_dir: str, sweep_id: str) -> str:
    """A --sweep-id given to report: a plain id that the sweep's folder ends with, or SpecError."""
    from ddpbench.config.errors import SpecError
    from ddpbench.config.ids import check_id

    check_id("--sweep-id", sweep_id, "reports/", nested=True)
    if not _ends_with(os.path.normpath(sweep_dir), sweep_id):
        raise SpecError(f"--sweep-id {sweep_id!r} is not the end of the sweep's folder {sweep_dir!r}")
    return sweep_id


OWNER_FILE = ".ddpbench-sweep-dir"
"""Beside the files written in reports/<sweep-id>/: whose they are, for a folder that holds no
index.html to say it (a pytest-benchmark export alone)."""


def owner_line(sweep_dir: str) -> str:
    """What a report holds to say whose it is (the template puts it in its head)."""
    return os.path.abspath(sweep_dir)


def claim(folder: str, sweep_dir: str) -> None:
    """Mark a folder under reports/ as this sweep's (`OWNER_FILE`)."""
    with open(os.path.join(folder, OWNER_FILE), "w", encoding="utf-8") as handle:
        handle.write(owner_line(sweep_dir) + "\n")


def _same_sweep(owner: str, sweep_dir: str) -> bool:
    """One sweep folder however it was reached (a symbolic link, a CI workspace's other path)."""
    return os.path.realpath(owner) == os.path.realpath(sweep_dir)


def folder_owner(folder: str) -> str | None:
    """Whose a folder under reports/ is: its index.html's owner line, else its `OWNER_FILE`."""
    owner = report_owner(os.path.join(folder, "index.html"))
    if owner is None:
        try:
            with open(os.path.join(folder, OWNER_FILE), encoding="utf-8") as handle:
                owner = handle.read().strip() or None
        except OSError:
            return None
    return owner


def report_owner(path: str) -> str | None:
    """The sweep folder an existing report was written from; None where it does not say (or is
    not there)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            head = handle.read(4096)
    except OSError:
        return None
    found = re.search(rf'<meta name="{OWNER_META}" content="([^"]*)"', head)
    if not found:
        return None
    import html

    return html.unescape(found[1])


def default_report_path(sweep_dir: str, file_name: str = "index.html", sweep_id: str | None = None) -> tuple[str, str]:
    """(where the sweep's report goes, why not in reports/<sweep-id>/ where it does not: "" there)."""
    place = os.path.join(REPORTS, *sweep_id_of(sweep_dir, sweep_id).split("/"), file_name)
    index = os.path.join(os.path.dirname(place), "index.html")
    if not os.path.exists(index) and not os.path.exists(place):
        return place, ""
    owner = folder_owner(os.path.dirname(place))
    if owner is not None and _same_sweep(owner, sweep_dir):
        return place, ""
    whose = f"the report of {owner}" if owner else "a report that does not say whose it is"
    return os.path.join(sweep_dir, OWN_FOLDER, file_name), f"{os.path.dirname(place)} holds {whose}"
