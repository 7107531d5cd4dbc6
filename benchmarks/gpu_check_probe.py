"""The event-clock and matrix-product probe of benchmarks/gpu_check.py: a script run in its own
process on the GPU (CUDA-event step times against the window's wall time, a host sleep inside a
step, a bf16 matrix product), and what its figures must show."""

from __future__ import annotations

from gpu_check_processes import CheckFailed  # this folder: sys.path[0] when run as a script

from ddpbench.analysis.peaks import device_peak

MATMUL_FRACTION_RANGE = (0.40, 1.00)
"""An 8192^3 bf16 matrix product reaches this fraction of the published peak."""

PROBE_CODE = r"""
import json, time, torch
from ddpbench.worker.clock import StepClock
device = torch.device("cuda", 0)
matrix = torch.randn(4096, 4096, device=device)
def product():
    global matrix
    matrix = torch.tanh(matrix @ matrix)
for _ in range(5): product()
torch.cuda.synchronize()
started = time.perf_counter()
for _ in range(10): product()
torch.cuda.synchronize()
per_product = (time.perf_counter() - started) / 10
repeat = max(1, round(0.05 / per_product))
clock = StepClock(device)
torch.cuda.synchronize()
started = time.perf_counter()
clock.mark()
for _ in range(20):
    for _ in range(repeat): product()
    clock.mark()
torch.cuda.synchronize()
wall = time.perf_counter() - started
steps = clock.step_times_s()
sleepy = StepClock(device)
sleepy.mark()
for _ in range(5):
    product(); torch.cuda.synchronize(); time.sleep(0.05); sleepy.mark()
sleep_steps = sleepy.step_times_s()
a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
for _ in range(3): a @ b
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(10): a @ b
end.record(); end.synchronize()
seconds = start.elapsed_time(end) / 1000 / 10
print(json.dumps({"window_wall_s": wall, "event_step_sum_s": sum(steps), "events_over_wall": sum(steps) / wall,
                  "step_s_median": sorted(steps)[len(steps) // 2], "min_step_with_sleep_s": min(sleep_steps),
                  "bf16_matmul_tflops": 2 * 8192 ** 3 / seconds / 1e12}))
"""


def judge_probe(found: dict, device_name: str | None, figures: dict) -> str:
    """The probe's line, or CheckFailed naming what it got wrong."""
    problems = []
    if abs(found["events_over_wall"] - 1) > 0.03:
        problems.append(f"CUDA-event step times sum to {found['events_over_wall']:.3f} x the window's wall time")
    if found["min_step_with_sleep_s"] < 0.05:
        problems.append(
            f"a 50 ms host sleep inside a step was not in its time ({found['min_step_with_sleep_s']:.4f} s)"
        )
    peak = device_peak(device_name)
    message = f"events/wall {found['events_over_wall']:.4f}, bf16 matmul {found['bf16_matmul_tflops']:.0f} TFLOP/s"
    if peak is None:  # unchecked is not a pass: a throttled or misconfigured GPU would slip through
        problems.append(
            f"unknown GPU {device_name!r}: no published peak to check the bf16 matmul against (add its "
            "datasheet's dense figures to ddpbench/analysis/peaks.py)"
        )
    else:
        fraction = found["bf16_matmul_tflops"] / peak.tflops["bf16"]
        figures["bf16_matmul_fraction_of_peak"] = fraction
        low, high = MATMUL_FRACTION_RANGE
        if not low <= fraction <= high:
            problems.append(
                f"bf16 matmul at {100 * fraction:.0f} % of the {peak.label} peak, "
                f"outside {100 * low:.0f}-{100 * high:.0f} %"
            )
        message += f" ({100 * fraction:.0f} % of {peak.tflops['bf16']} peak)"
    if problems:
        raise CheckFailed("; ".join(problems))
    return message
