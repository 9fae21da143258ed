"""Paired comparison of two held-out evaluations: per-scenario means and the exact sign test.

The p-values are checked against the binomial tail written out by hand (no statistics package is a
dependency), and the per-scenario means against groups as the runner makes them.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from art_adapters import EvalReport, PairedComparison, Trajectory, TrajectoryGroup
from art_adapters._paired import compare_scenarios, scenario_means, sign_test_p
from art_adapters._trajectory import Message


def _tail(gained: int, lost: int) -> Fraction:
    n = gained + lost
    return Fraction(sum(comb(n, k) for k in range(gained, n + 1)), 2**n)


@pytest.mark.parametrize(("gained", "lost"), [(12, 0), (13, 1), (7, 0), (9, 1), (5, 5), (0, 3), (2, 9)])
def test_the_sign_test_is_the_binomial_tail(gained: int, lost: int) -> None:
    assert sign_test_p(gained, lost) == pytest.approx(float(_tail(gained, lost)), rel=1e-12)


def test_the_sign_test_known_values_and_bad_counts() -> None:
    assert sign_test_p(12, 0) == 1 / 4096  # all 12 changes upward
    assert sign_test_p(5, 5) == pytest.approx(638 / 1024)
    assert sign_test_p(0, 0) == 1.0  # nothing changed: no evidence
    assert sign_test_p(0, 4) == 1.0
    with pytest.raises(ValueError, match=">= 0"):
        sign_test_p(-1, 2)


def _trajectory(reward: float | None, **metrics: float) -> Trajectory:
    return Trajectory(messages=[Message(role="user", content="q")], reward=reward, metrics=metrics)


def test_scenario_means_pool_a_scenarios_rollouts_and_skip_what_has_no_id() -> None:
    groups = [
        TrajectoryGroup(
            trajectories=[_trajectory(1.0, correct=1), _trajectory(0.0, correct=0, note=float("nan"))],
            metadata={"scenario_id": "q1"},
        ),
        TrajectoryGroup(trajectories=[_trajectory(0.5, correct=1)], metadata={"scenario_id": "q1"}),
        TrajectoryGroup(trajectories=[_trajectory(None, correct=0)], metadata={"scenario_id": "q2"}),
        TrajectoryGroup(trajectories=[_trajectory(1.0, correct=1)]),  # no scenario id: left out
    ]
    means = scenario_means(groups)
    assert means == {"q1": {"reward": 0.5, "correct": pytest.approx(2 / 3)}, "q2": {"correct": 0.0}}


def test_compare_counts_rises_falls_and_ties_on_shared_scenarios() -> None:
    before = {"a": {"correct": 0.0}, "b": {"correct": 0.5}, "c": {"correct": 1.0}, "d": {"correct": 0.0}}
    after = {"a": {"correct": 1.0}, "b": {"correct": 0.25}, "c": {"correct": 1.0}, "e": {"correct": 1.0}}
    paired = compare_scenarios(before, after, "correct")
    assert (paired.gained, paired.lost, paired.unchanged) == (1, 1, 1)  # d and e are not in both
    assert paired.p_value == 0.75 and not paired.beyond_noise()
    assert "up on 1, down on 1, unchanged on 1" in paired.describe()
    with pytest.raises(ValueError, match="'reward'"):
        compare_scenarios(before, after, "reward")


def test_eval_reports_compare_and_a_lopsided_rise_is_beyond_noise() -> None:
    def report(step: int, right: set[int]) -> EvalReport:
        scenarios = {f"q{i}": {"correct": float(i in right)} for i in range(36)}
        return EvalReport(
            step=step, reward_mean=None, scored=36, trajectories=36, exceptions=0, scenarios=scenarios
        )

    base, trained = report(0, {0, 1, 2}), report(8, set(range(1, 15)))
    paired = base.compare(trained, "correct")
    assert isinstance(paired, PairedComparison)
    assert (paired.gained, paired.lost, paired.unchanged) == (12, 1, 23)
    assert paired.p_value == pytest.approx(float(_tail(12, 1))) and paired.beyond_noise(0.01)
    assert not trained.compare(base, "correct").beyond_noise(0.5)  # a fall is never a gain
