"""What docs/gpu-check.md says a GPU check's bundle holds, read from the page itself, and the bundle
compared with it: every file in the bundle is one the page lists, and no trace is in it unless asked
for. The page's list is a ```text block after the heading "What the bundle holds": one pattern a line,
`<name>` standing for one path component and `<path>` for any number of them. No torch.
"""

from __future__ import annotations

import os
import re

from gpu_check_processes import PROJECT, CheckFailed

PAGE = os.path.join(PROJECT, "docs", "gpu-check.md")
HEADING = "What the bundle holds"


def page_patterns(page: str = PAGE) -> list[str]:
    """The page's patterns (the first word of each line of the block under HEADING)."""
    with open(page, encoding="utf-8") as handle:
        text = handle.read()
    section = text[text.index(f"## {HEADING}") :]
    block = re.search(r"```text\n(.*?)```", section, re.S)[1]
    return [line.split()[0] for line in block.splitlines() if line.strip()]


def pattern_regex(pattern: str) -> re.Pattern:
    parts = re.split(r"(<[a-z-]+>)", pattern)
    regex = "".join(
        ".+" if part == "<path>" else "[^/]+" if re.fullmatch(r"<[a-z-]+>", part) else re.escape(part) for part in parts
    )
    return re.compile(regex + r"\Z")


def unlisted(names: list[str], patterns: list[str]) -> list[str]:
    """The bundle's files that no pattern of the page covers."""
    regexes = [pattern_regex(pattern) for pattern in patterns]
    return [name for name in names if not any(regex.match(name) for regex in regexes)]


def unmatched(names: list[str], patterns: list[str]) -> list[str]:
    """The page's patterns that no file of the bundle matches."""
    return [pattern for pattern in patterns if not any(pattern_regex(pattern).match(name) for name in names)]


def judge_bundle(names: list[str], patterns: list[str], must_hold: list[str]) -> str:
    """CheckFailed where the bundle holds a file the page does not list, a trace, or lacks one of
    `must_hold` (patterns that this run's folder gives files for)."""
    problems = []
    traces = [name for name in names if "/traces/" in name or ".pt.trace." in name]
    if traces:
        problems.append(f"{len(traces)} traces in a bundle made without --with-traces: {traces[:3]}")
    extra = unlisted(names, patterns)
    if extra:
        problems.append(f"files the page does not list ({len(extra)}): {extra[:5]}")
    lacking = unmatched(names, must_hold)
    if lacking:
        problems.append(f"nothing for {lacking}")
    if problems:
        raise CheckFailed("; ".join(problems))
    return f"{len(names)} files, each one the page lists, no trace"
