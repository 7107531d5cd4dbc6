"""Confirmation before a red job: when a stored-baseline or history comparison finds a regression
and a base environment is given (`ddpbench gate --confirm-with BASE`), the flagged configurations
run again in this job, base and candidate interleaved for K rounds (`ddpbench ab`'s rounds and
paired test), and the verdict is the confirmation's. No torch.

Two sweeps hours apart differ by the machine's drift as well as by the code; rounds of base then
candidate a minute apart share the machine's state, so what the confirmation still finds is the
code. It answers for what one configuration's rounds can measure, throughput and the exposed
share. Efficiency is a ratio of two configurations of one sweep, from which a uniformly slower
machine cancels: a regression there is kept as found, and the note says so.

A configuration is rerun from its candidate record's spec (`run_options`): the options that
define it, written as `ddpbench run` flags from the very field declarations that parse them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from dataclasses import dataclass, field

from ddpbench.config.options import argument_options
from ddpbench.config.spec import CONFIGURATION_FIELDS, MEASUREMENT_FIELDS, DDPKnobs, RunSpec
from ddpbench.gate import stats
from ddpbench.gate.ab import AB_MEASURES, Side, paired_comparisons, resolve_side, run_ab
from ddpbench.gate.compare import Comparison, GateError
from ddpbench.gate.values import describe, run_key
from ddpbench.records.schema import Record

# The record's resolved values ("auto" device and default sizes pinned to what the candidate ran)
# of the options `ddpbench run` takes for them; DDP's knobs too where the strategy is ddp.
RUN_FIELDS = ("workload", *CONFIGURATION_FIELDS, *MEASUREMENT_FIELDS)
DDP_FIELDS = tuple(f.name for f in dataclasses.fields(DDPKnobs))


@dataclass
class Confirmation:
    base: str
    rounds: int
    out_dir: str
    comparisons: list[Comparison] = field(default_factory=list)
    """The same-job A/B's comparisons of the flagged configurations and measures."""
    kept: list[Comparison] = field(default_factory=list)
    """Regressions a same-job A/B cannot answer, kept as the first comparison found them."""
    notes: list[str] = field(default_factory=list)


def base_side(given: str, python: str | None = None) -> Side:
    """The environment to confirm against: a Python executable, or a ddpbench working tree run by
    its own .venv when it has one (as `make gate BASE=` builds them in .gate-base/<sha>/)."""
    own = os.path.join(os.path.abspath(given), ".venv", "bin", "python")
    if python is None and os.path.isdir(given) and os.access(own, os.X_OK):
        python = own
    return resolve_side("A", given, python)


def run_options(spec: RunSpec) -> list[str]:
    """`ddpbench run` flags that run `spec`'s configuration again (its knobs included)."""
    if spec.script is not None:
        raise GateError("a script run cannot be confirmed by a rerun here (its script and arguments are its own)")
    if spec.nnodes > 1 or spec.launcher != "local":
        raise GateError(f"a {spec.nnodes}-node {spec.launcher} run cannot be rerun inside this job")
    options: list[str] = []
    groups = [(RunSpec, spec, RUN_FIELDS)] + ([(DDPKnobs, spec.ddp, DDP_FIELDS)] if spec.uses_ddp_knobs else [])
    for owner, values, names in groups:
        for name in names:
            value = getattr(values, name)
            if value is None:
                continue
            strings, keywords = argument_options(owner, name)
            action = keywords.get("action")
            if action is argparse.BooleanOptionalAction:
                options.append(strings[0] if value else "--no-" + strings[0].removeprefix("--"))
            elif action in ("store_true", "store_false"):
                if value != keywords["default"]:
                    options.append(strings[0])
            else:
                options += [strings[0], str(value)]
    return options


def flagged(comparisons: list[Comparison]) -> dict[str, set[str]]:
    """Configuration -> the measures the first comparison found regressed."""
    found: dict[str, set[str]] = {}
    for comparison in comparisons:
        if comparison.verdict == "regression":
            found.setdefault(comparison.configuration, set()).add(comparison.measure)
    return found


def _folder_name(configuration: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", configuration).strip("_")


def confirm(
    comparisons: list[Comparison],
    candidate: list[Record],
    base: Side,
    here: Side,
    rounds: int,
    out_dir: str,
    settings: stats.GateSettings,
    allow_failed: bool = False,
    progress=print,
    rewrite=None,
) -> Confirmation:
    """Rerun every flagged configuration as base/candidate rounds and gate each with the paired
    test; the family-wise false-alarm rate is shared by all the configurations confirmed."""
    result = Confirmation(base.given, rounds, out_dir)
    records = {describe(run_key(r)): r for r in candidate if r.status == "ok"}
    to_run = []
    for configuration, measures in flagged(comparisons).items():
        answerable = measures & set(AB_MEASURES)
        for measure in sorted(measures - answerable):
            result.kept += [c for c in comparisons if c.configuration == configuration and c.measure == measure]
            result.notes.append(
                f"{configuration}, {measure}: kept as found (a ratio within one sweep, from which a slower "
                "machine cancels; a same-job A/B of one configuration does not measure it)"
            )
        if not answerable:
            continue
        try:
            options = run_options(records[configuration].spec)
            # Commits of the user's repository: the workload file as it lies inside each side's tree.
            to_run.append((configuration, answerable, rewrite(options) if rewrite else options))
        except (KeyError, GateError) as exc:
            reason = str(exc) if isinstance(exc, GateError) else "no successful candidate run to rerun"
            result.kept += [c for c in comparisons if c.configuration == configuration and c.measure in answerable]
            result.notes.append(f"{configuration}: not confirmed, kept as found: {reason}")
    if not to_run:
        return result
    shared = dataclasses.replace(settings, family_alpha=settings.family_alpha / len(to_run))
    for configuration, measures, options in to_run:
        progress(f"confirming {configuration} ({', '.join(sorted(measures))}): {rounds} rounds, base then candidate")
        pairs = run_ab(base, here, options, rounds, os.path.join(out_dir, _folder_name(configuration)), progress)
        # Only the flagged measures are tested again: alpha is split over what is being confirmed.
        found, notes = paired_comparisons(
            pairs, settings=shared, allow_failed=allow_failed, measures=tuple(sorted(measures))
        )
        result.comparisons += [c for c in found if c.measure in measures or c.measure == "run"]
        result.notes += [f"{configuration}: {note}" for note in notes]
        # A flagged measure the rounds did not measure (too few usable rounds, no value) stays as found.
        answered = {c.measure for c in found}
        result.kept += [c for c in comparisons if c.configuration == configuration and c.measure in measures - answered]
    return result
