"""`ddpbench explain`'s JSON: one object per configuration, pooled over its runs, and the shape it
had before 0.2 (one object per run, the causes under their old names), kept for scripts that read
it. No torch."""

from __future__ import annotations

from ddpbench.analysis.answer_text import advice, largest_words, sentence
from ddpbench.analysis.answers import Answer
from ddpbench.analysis.causes import OLD_NAMES, RunAnswer
from ddpbench.analysis.estimates import Estimate
from ddpbench.analysis.without_ablation import data_wait

JSON_VERSION = 2


def _estimate(estimate: Estimate | None) -> dict | None:
    return estimate.as_dict() if estimate is not None else None


def answer_dict(answer: Answer, paths: dict) -> dict:
    spec = answer.record.spec
    return {
        "configuration": answer.name,
        "workload": spec.workload,
        "strategy": spec.strategy_name,
        "world_size": spec.world_size,
        "runs": answer.run_ids,
        "left_out": answer.left_out,
        "throughput": _estimate(answer.throughput),
        "reference_throughput": _estimate(answer.reference_throughput),
        "efficiency": _estimate(answer.efficiency),
        "in_process_efficiency": _estimate(answer.in_process),
        "in_process_loss_points": _estimate(answer.loss_points),
        "step_s": _estimate(answer.step),
        "measured_in_place": answer.in_place,
        "causes": {name: cause.as_dict() for name, cause in answer.causes.items()},
        "largest": answer.largest(),
        "check": {
            "efficiency_minus_in_process_points": _estimate(answer.gap),
            **{name: cause.as_dict() for name, cause in answer.checks.items()},
        },
        "straggler": answer.straggler.as_dict() if answer.straggler else None,
        "contention_parts": {name: part.as_dict() for name, part in answer.parts.items()},
        "cpu_denied": answer.cpu.as_dict() if answer.cpu is not None else None,
        "sentence": sentence(answer),
        "verdict": largest_words(answer),
        "advice": [{"cause": name, "text": text} for name, text in advice(answer)],
        "checks_failed": answer.failed_checks(),
        "machine": answer.machine,
        "critical_path": {run_id: paths.get(run_id) for run_id in answer.run_ids},
        "by_run": [
            dict(run_dict(run), left_out=run.run_id in answer.left_out) for run in answer.every_run or answer.runs
        ],
    }


def run_dict(run: RunAnswer) -> dict:
    """One run of the configuration, as measured: its own figures before pooling."""
    return {
        "run_id": run.run_id,
        "repeat": run.record.spec.repeat,
        "step_s": run.step_s,
        "reference_step_s": run.reference_step_s,
        "reference_run_ids": run.reference_run_ids,
        "data_wait_s": data_wait(run.record),
        "efficiency": _estimate(run.efficiency),
        "in_process_efficiency": _estimate(run.in_process),
        "measured_in_place": run.in_place,
        "causes": {name: cause.as_dict() for name, cause in run.causes.items()},
        "check": {name: cause.as_dict() for name, cause in run.checks.items()},
        "straggler": run.straggler.as_dict(),
        "rounds": run.rounds,
    }


def answers_json(answers: list[Answer], paths: dict) -> dict:
    return {"version": JSON_VERSION, "configurations": [answer_dict(answer, paths) for answer in answers]}


def _legacy_term(run: RunAnswer, name: str) -> dict:
    cause = run.causes.get(name) or run.checks.get(name)
    seconds = cause.seconds if cause else None
    return {
        "s_per_step": seconds.value if seconds else None,
        "points": cause.points.value if cause and cause.points else None,
        "basis": cause.basis if cause else "",
        "ci_low_s": seconds.low if seconds else None,
        "ci_high_s": seconds.high if seconds else None,
        "significant": bool(cause and cause.significant),
    }


def legacy_runs_json(answers: list[Answer], paths: dict) -> list[dict]:
    """Before 0.2: a list with one object per DDP run, its terms under their old names."""
    found = []
    renamed = {new: old for old, new in OLD_NAMES.items()}
    for answer in answers:
        largest = answer.largest()
        for run in answer.runs:
            spec = run.record.spec
            found.append(
                {
                    "run_id": run.run_id,
                    "workload": spec.workload,
                    "world_size": spec.world_size,
                    "strategy": spec.strategy_name,
                    "efficiency": run.efficiency.value if run.efficiency else None,
                    "step_s": run.step_s,
                    "reference_step_s": run.reference_step_s,
                    "terms": {renamed.get(name, name): _legacy_term(run, name) for name in (*run.causes, *run.checks)},
                    "in_run": {"efficiency": _estimate(run.in_process)} if run.in_process else {},
                    "largest_loss": renamed.get(largest[0], largest[0]) if largest else None,
                    "reference_run_ids": run.reference_run_ids,
                    "machine": answer.machine,
                    "critical_path": paths.get(run.run_id),
                }
            )
    return found
