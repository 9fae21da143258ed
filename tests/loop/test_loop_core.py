"""The loop's pure parts: the batch order, what counts as unscored, the config's checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from art_adapters import ConfigError, Trajectory, TrajectoryGroup
from art_adapters._loop import LoopConfig, next_batch
from art_adapters._scorers import unscored_reason


def test_batches_cover_every_scenario_once_per_epoch_and_are_reproducible() -> None:
    scenarios = list(range(10))
    first_epoch = [s for i in range(5) for s in next_batch(scenarios, i, 2, seed=7)]
    assert sorted(first_epoch) == scenarios
    assert first_epoch != scenarios  # shuffled
    assert next_batch(scenarios, 3, 2, seed=7) == next_batch(scenarios, 3, 2, seed=7)
    second_epoch = [s for i in range(5, 10) for s in next_batch(scenarios, i, 2, seed=7)]
    assert second_epoch != first_epoch  # reshuffled
    assert len(next_batch([1, 2, 3], 0, 5, seed=0)) == 5  # wraps into the next epoch


def test_unscored_reason_names_each_case() -> None:
    scored = TrajectoryGroup(trajectories=[Trajectory(reward=1.0), Trajectory(reward=0.0)])
    assert unscored_reason(scored) is None
    partly = TrajectoryGroup(trajectories=[Trajectory(reward=1.0), Trajectory()])
    assert unscored_reason(partly) == "1 of 2 trajectories have no reward"
    judged = scored.model_copy(update={"metadata": {"ruler": {"status": "unscored", "reason": "timeout"}}})
    assert unscored_reason(judged) == "judge: timeout"
    broken = scored.model_copy(update={"metadata": {"scorer_error": "KeyError: 'x'"}})
    assert unscored_reason(broken) == "reward function: KeyError: 'x'"
    assert "no trajectory" in (unscored_reason(TrajectoryGroup(trajectories=[])) or "")


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValidationError, match="rollouts_per_group"):
        LoopConfig(steps=1, rollouts_per_group=1)
    with pytest.raises(ValidationError, match="steps"):
        LoopConfig(steps=-1)
    with pytest.raises(ValidationError, match="extra"):
        LoopConfig(steps=1, step=2)


async def test_combined_scorer_reports_a_judge_failure_as_unscored() -> None:
    import socket

    from langchain_openai import ChatOpenAI

    from art_adapters._scorers import combined_scorer, verifiable_scorer
    from art_adapters._trajectory import Message

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judge = ChatOpenAI(model="x", base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=5)
    group = TrajectoryGroup(
        trajectories=[
            Trajectory(messages=[Message(role="user", content="hi"), Message(role="assistant", content=c)])
            for c in ("a", "bb")
        ]
    )
    length = verifiable_scorer(lambda t, scenario: len(t.messages[-1].content or ""))
    (scored,) = await length([group], [None])
    assert scored.rewards == [1.0, 2.0] and group.rewards == [None, None]  # a copy is scored
    combined = combined_scorer(judge, lambda t, scenario: 1.0, weight=0.5, max_retries=0, cache=False)
    (unscored,) = await combined([group], [None])
    assert (unscored_reason(unscored) or "").startswith("judge:")
    with pytest.raises(ConfigError, match="weight"):
        combined_scorer(judge, lambda t, s: 1.0, weight=1.5)


async def test_a_loop_config_with_a_count_budget_runs() -> None:
    # The bug this replaced: LoopConfig(max_exceptions=3) validated, then run_groups rejected 3.0
    # as a float read as a fraction. A count is now max_failures, an int, and the loop honours it.
    import art_adapters as aa

    config = aa.LoopConfig(steps=1, run=aa.RunConfig(max_failures=3, max_failure_rate=None))

    async def rollout(scenario: dict[str, int]) -> Trajectory:
        if scenario["i"] < 3:
            raise RuntimeError("this one fails")
        return Trajectory(reward=1.0)

    scenarios = [{"i": i} for i in range(8)]
    groups = await aa.run_groups(rollout, scenarios, n=1, config=config.run, progress=False)
    assert sum(len(g.exceptions) for g in groups) == 3  # over the loop's default 25% of 8, within 3
    with pytest.raises(aa.RolloutBudgetError, match="max_failure_rate=0.25"):
        await aa.run_groups(rollout, scenarios, n=1, config=aa.LoopConfig(steps=1).run, progress=False)


def test_the_moved_loop_settings_point_to_run() -> None:
    with pytest.raises(ValidationError, match=r"max_exceptions moved into LoopConfig.run .*max_failures"):
        LoopConfig(steps=1, max_exceptions=3)
    with pytest.raises(ValidationError, match=r"run=RunConfig\(timeout_s=\.\.\.\)"):
        LoopConfig(steps=1, rollout_timeout_s=30)
    config = LoopConfig(steps=1)
    assert (config.run.timeout_s, config.run.max_failure_rate, config.run.max_failures) == (600.0, 0.25, None)
