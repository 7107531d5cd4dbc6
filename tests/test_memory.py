"""Memory per rank: each strategy compared with a like run (its own eager self, eager DDP), and the
model state each strategy really holds (DDP's gradient buckets, FSDP2's unsharded buffers). The
real runs that fill the record are in test_strategies.py; these are the numbers' logic."""

import pandas as pd
import pytest

from ddpbench.analysis.frames import format_memory, memory_table
from ddpbench.worker.model_state import gradient_bucket_bytes

MIB = 2**20


def scaling_rows(peaks_mib: dict[str, float], state_mib: dict[str, float], world_size: int = 2) -> pd.DataFrame:
    """The scaling table's columns memory_table reads, one row per strategy at one world size."""
    return pd.DataFrame(
        [
            {
                "workload": "mlp",
                "size": "tiny",
                "precision": "fp32",
                "device": "cpu",
                "scaling": "weak",
                "threads_per_device": 1,
                "world_size": world_size,
                "batch_size": 8,
                "strategy": strategy,
                "peak_memory_bytes": peak * MIB,
                "warmup_peak_memory_bytes": peak * MIB,
                "compile_peak_memory_bytes": peak * MIB if "+" in strategy else None,
                "model_state_bytes": state_mib[strategy] * MIB,
            }
            for strategy, peak in peaks_mib.items()
        ]
    )


# The strategies page's 2-rank figures (docs/measurements/strategies-cpu.md): fsdp2+compile's +22 %
# against DDP holds eager fsdp2's own +13 %; against eager fsdp2 compiling added +8 %.
PAGE = scaling_rows(
    {"ddp": 768, "ddp+compile": 853, "fsdp2": 870, "fsdp2+compile": 937},
    {"ddp": 64, "ddp+compile": 64, "fsdp2": 32, "fsdp2+compile": 32},
)


def row(found: pd.DataFrame, strategy: str) -> pd.Series:
    return found[found["strategy"] == strategy].iloc[0]


def test_a_compiled_strategy_is_compared_with_its_own_eager_self_and_with_ddp():
    found = memory_table(PAGE)
    fsdp2_compiled = row(found, "fsdp2+compile")
    assert fsdp2_compiled["timed peak vs eager"] == pytest.approx(937 / 870 - 1)  # +7.7 %: compiling's own
    assert fsdp2_compiled["timed peak vs DDP"] == pytest.approx(937 / 768 - 1)  # +22 %: fsdp2's and compiling's
    assert fsdp2_compiled["model state vs eager"] == pytest.approx(0) and fsdp2_compiled["model state vs DDP"] == -0.5
    assert row(found, "ddp+compile")["timed peak vs eager"] == pytest.approx(853 / 768 - 1)
    eager_fsdp2 = row(found, "fsdp2")
    assert pd.isna(eager_fsdp2["timed peak vs eager"])
    assert eager_fsdp2["timed peak vs DDP"] == pytest.approx(870 / 768 - 1)
    ddp = row(found, "ddp")
    assert pd.isna(ddp["timed peak vs eager"]) and pd.isna(ddp["timed peak vs DDP"])


def test_a_compiled_run_without_its_eager_run_has_no_change_against_it():
    found = memory_table(scaling_rows({"ddp": 768, "fsdp2+compile": 937}, {"ddp": 64, "fsdp2+compile": 32}))
    compiled = row(found, "fsdp2+compile")
    assert pd.isna(compiled.get("timed peak vs eager"))
    assert compiled["timed peak vs DDP"] == pytest.approx(937 / 768 - 1)


def test_eager_runs_alone_have_no_eager_column():
    found = memory_table(scaling_rows({"ddp": 768, "fsdp2": 870}, {"ddp": 64, "fsdp2": 32}))
    assert not [c for c in found.columns if c.endswith("vs eager")]
    assert row(found, "fsdp2")["model state vs DDP"] == -0.5


def test_the_terminal_table_says_what_each_change_is_against_and_what_model_state_counts():
    text = format_memory(PAGE, "process_peak_rss")
    legend, header, *lines = text.splitlines()
    assert "vs eager = a compiled strategy against the same strategy uncompiled" in legend
    assert "vs DDP = against eager DDP" in legend
    assert "DDP's gradient buckets" in legend and "fsdp2's unsharded parameters and gradients" in legend
    assert "timed peak vs eager" in header and "timed peak vs DDP" in header
    compiled = next(line for line in lines if " fsdp2+compile " in f" {line} ")
    assert "+8%" in compiled and "+22%" in compiled, compiled


class FakeDDP:
    def __init__(self, data: dict):
        self.data = data

    def _get_ddp_logging_data(self) -> dict:
        return self.data


@pytest.mark.parametrize(
    "data, expected",
    [
        # the reducer logs its buckets' bytes as text; after the first step the rebuilt ones hold
        ({"bucket_sizes": "1048576, 273448", "has_rebuilt_buckets": 0, "gradient_as_bucket_view": 0}, 1322024),
        (
            {"bucket_sizes": "1048576", "rebuilt_bucket_sizes": "26214400, 400", "has_rebuilt_buckets": 1},
            26214800,
        ),
        # the gradients are views of the buckets: counted once, as gradients
        ({"bucket_sizes": "1048576", "gradient_as_bucket_view": 1}, 0),
    ],
)
def test_ddps_gradient_buckets_are_the_reducers_own_sizes(data, expected):
    assert gradient_bucket_bytes(FakeDDP(data)) == expected
