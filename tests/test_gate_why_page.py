"""The gate-why page judges what the gate said: a planted regression passes only where it failed,
slowed its DDP step by 30 % or more and was named first by its planted cause (the delayed rank with
its rank and phase), and the A/A pairs only where nothing failed and at most 1 comparison in 20
named a cause. Hand-made gate outputs; no runs."""

import os
import sys

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from gate_why import aa_pairs, ddp_configuration, judge_aa, judge_planted, why_block  # noqa: E402


def cause(name: str, ms: float, p: float = 0.001) -> dict:
    seconds = {"value": ms / 1e3, "low": (ms - 1) / 1e3, "high": (ms + 1) / 1e3}
    return {"name": name, "seconds": seconds, "p_value": p, "grew": p < 0.006}


def planted_gate(named: dict, slowdown: float = 80.0, straggler=None, regressed=("throughput",)) -> dict:
    """A planted gate's kept output: each case's configuration regressed on `regressed` and named `named[case]`."""
    why, comparisons = [], []
    for case, causes in named.items():
        configuration = ddp_configuration(case)
        why.append(
            {
                "configuration": configuration,
                "named": causes,
                "causes": [cause(name, 10.0 - i) for i, name in enumerate(causes)],
                "ddp_slowdown_pct": {"value": slowdown, "low": slowdown - 10, "high": slowdown + 10},
                "straggler": straggler if case == "backward" else None,
            }
        )
        comparisons += [{"configuration": configuration, "measure": m, "verdict": "regression"} for m in regressed]
    why.append({"configuration": ddp_configuration("steady"), "named": [], "causes": [cause("data", 0.1, 0.5)]})
    return {"verdict": {"why": why, "comparisons": comparisons}}


def test_each_planted_case_passes_only_when_its_own_cause_is_named_first():
    right = {"forward": ["compute"], "gradients": ["exposed_comm", "ddp_overhead"], "backward": ["straggler_wait"]}
    straggler = {"rank": 1, "phase": "backward", "named": True}
    judged = judge_planted(planted_gate(right, straggler=straggler), ["forward", "gradients", "backward"])
    assert all(judged[case]["ok_cause"] and judged[case]["ok_fails"] and judged[case]["ok_slowdown"] for case in right)
    assert judged["steady"]["ok"] and judged["steady"]["compared"]
    wrong_rank = judge_planted(planted_gate(right, straggler={**straggler, "rank": 0}), ["backward"])
    assert not wrong_rank["backward"]["ok_cause"]
    wrong_phase = judge_planted(planted_gate(right, straggler={**straggler, "phase": "forward"}), ["backward"])
    assert not wrong_phase["backward"]["ok_cause"]
    overhead_first = judge_planted(planted_gate({"gradients": ["ddp_overhead", "exposed_comm"]}), ["gradients"])
    assert not overhead_first["gradients"]["ok_cause"]


def test_a_planted_case_that_did_not_fail_or_slowed_less_than_30_percent_is_not_met():
    named = {"forward": ["compute"]}
    assert not judge_planted(planted_gate(named, regressed=()), ["forward"])["forward"]["ok_fails"]
    assert not judge_planted(planted_gate(named, slowdown=25.0), ["forward"])["forward"]["ok_slowdown"]
    assert judge_planted(planted_gate(named, slowdown=30.0), ["forward"])["forward"]["ok_slowdown"]


def aa_gate(named: int, compared: int, failing: bool = False) -> dict:
    why = [
        {"configuration": f"w{i} ddp x2", "causes": [cause("data", 0.1)], "named": ["data"] if i < named else []}
        for i in range(compared)
    ]
    comparisons = [{"configuration": "w0", "measure": "throughput", "verdict": "regression" if failing else "pass"}]
    return {"code": 1 if failing else 0, "verdict": {"why": why, "comparisons": comparisons}}


def test_aa_allows_at_most_one_configuration_in_twenty_naming_a_cause_and_no_failure():
    assert judge_aa({"aa a b": aa_gate(1, 20)})["ok_rate"]
    assert not judge_aa({"aa a b": aa_gate(1, 10), "aa c d": aa_gate(1, 10)})["ok_rate"]
    assert judge_aa({"aa a b": aa_gate(0, 12)})["ok_fails_nothing"]
    assert not judge_aa({"aa a b": aa_gate(0, 12, failing=True)})["ok_fails_nothing"]
    assert judge_aa({"aa a b": aa_gate(0, 12)})["ok_passes"]
    busy = {**aa_gate(0, 12), "code": 4}  # a run the speed check flagged: no comparison failed, the job did
    assert judge_aa({"aa a b": busy})["ok_fails_nothing"] and not judge_aa({"aa a b": busy})["ok_passes"]
    assert aa_pairs(6) == [("baseline", "aa-2"), ("aa-3", "aa-4"), ("aa-5", "aa-6")]


def test_the_page_keeps_the_gates_cause_lines_and_its_last_line_only():
    stdout = "\n".join(
        [
            "configuration  measure",
            "note: something",
            "why  w ddp x2 (regression): waiting for the slowest rank grew beyond noise",
            "  1. waiting for the slowest rank: +9.82 ± 3.69 ms per step",
            "  reproduce: cd /x && ddpbench sweep --workloads w.py:f",
            "(a cause is named where its ms per step grew beyond noise ...)",
            "  probe            unit              baseline  candidate",
            "  matmul_fp32      GFLOP/s              82.68      66.86",
            "verdict: REGRESSION (...)",
            "ddpbench gate exited 1: a regression",
        ]
    )
    assert why_block(stdout) == [
        "why  w ddp x2 (regression): waiting for the slowest rank grew beyond noise",
        "  1. waiting for the slowest rank: +9.82 ± 3.69 ms per step",
        "  reproduce: cd /x && ddpbench sweep --workloads w.py:f",
        "(a cause is named where its ms per step grew beyond noise ...)",
        "ddpbench gate exited 1: a regression",
    ]
