import pytest

from ddpbench.analysis.metrics import distribution, iteration_times_s, run_metrics


def test_iteration_time_is_the_slowest_rank_at_each_step():
    assert iteration_times_s([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]


def test_ranks_with_different_step_counts_are_refused():
    with pytest.raises(ValueError, match="different numbers of steps"):
        iteration_times_s([[1.0, 2.0], [1.0]])


def test_distribution_by_hand():
    summary = distribution([1.0, 2.0, 3.0, 4.0, 5.0])
    assert summary["mean"] == 3.0
    assert summary["std"] == pytest.approx(1.5811388, rel=1e-6)  # sample std, sqrt(2.5)
    assert summary["p50"] == 3.0
    assert summary["p90"] == pytest.approx(4.6)  # linear: 1 + 0.9 * 4 -> between 4 and 5
    assert summary["p99"] == pytest.approx(4.96)
    assert (summary["min"], summary["max"]) == (1.0, 5.0)


def test_single_value_has_zero_spread():
    assert distribution([0.2])["std"] == 0.0


def test_throughput_counts_global_samples_over_the_window():
    metrics = run_metrics([[0.1] * 10, [0.1] * 10], window_s=2.0, batch_size=8, world_size=2, units_per_sample=64)
    assert metrics["global_samples"] == 8 * 2 * 10
    assert metrics["throughput_samples_per_s"] == 80.0
    assert metrics["throughput_samples_per_s_per_device"] == 40.0
    assert metrics["throughput_units_per_s"] == 80.0 * 64


def test_window_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        run_metrics([[0.1]], window_s=0.0, batch_size=1, world_size=1, units_per_sample=1)
