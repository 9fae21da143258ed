"""run_groups: concurrency, timeouts, failures kept as data, the budget, retries, ids, loops."""

from __future__ import annotations

import asyncio
import io
import sys
import time
from typing import Any

import pytest

import art_adapters as aa
from art_adapters._errors import ConfigError
from art_adapters._runner import RunProgress, scenario_id


def tolerate(count: int) -> aa.RunConfig:
    """A budget of ``count`` failed rollouts, whatever their share."""
    return aa.RunConfig(max_failures=count, max_failure_rate=None)


def _trajectory(scenario: dict[str, Any], reward: float | None = 1.0) -> aa.Trajectory:
    return aa.Trajectory(messages=[aa.Message(role="user", content=str(scenario.get("q")))], reward=reward)


class Recorder:
    """A rollout with scripted behaviour per scenario, recording what happened to each call."""

    def __init__(self) -> None:
        self.running = 0
        self.max_running = 0
        self.started = 0
        self.cancelled = 0
        self.calls: dict[str, int] = {}

    async def __call__(self, scenario: dict[str, Any]) -> aa.Trajectory:
        key = str(scenario["q"])
        self.calls[key] = self.calls.get(key, 0) + 1
        self.started += 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await asyncio.sleep(scenario.get("sleep", 0.0))
            if scenario.get("fail"):
                raise ValueError(f"scenario {key} is broken")
            if scenario.get("flaky") and self.calls[key] % 2 == 1:
                raise ConnectionError("flaky tool server")
            return _trajectory(scenario, scenario.get("reward", 1.0))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1


async def test_groups_in_order_with_stable_ids_and_indexes() -> None:
    scenarios = [{"id": "first", "q": 1}, {"q": 2, "x": [1, 2]}, {"q": 3}]
    groups = await aa.run_groups(Recorder(), scenarios, n=3, progress=False)

    assert [g.metadata["scenario_id"] for g in groups] == [
        "first",
        scenario_id(scenarios[1]),
        scenario_id(scenarios[2]),
    ]
    assert scenario_id({"x": [1, 2], "q": 2}) == scenario_id(scenarios[1])  # key order does not matter
    assert scenario_id({"q": 2, "x": [1, 3]}) != scenario_id(scenarios[1])
    assert scenario_id(scenarios[1]).startswith("scn-")
    for group, scenario in zip(groups, scenarios, strict=True):
        assert len(group) == 3 and group.exceptions == []
        assert [t.metadata["rollout_index"] for t in group.trajectories] == [0, 1, 2]
        assert {t.metadata["scenario_id"] for t in group.trajectories} == {group.metadata["scenario_id"]}
        assert group.metadata["scenario"] == scenario
        assert all(t.metadata["attempts"] == 1 for t in group.trajectories)


async def test_scenario_id_from_attribute_and_pydantic_hash() -> None:
    class WithId:
        id = 42

    class Task(aa.Message):
        pass

    assert scenario_id(WithId()) == "42"
    assert scenario_id(Task(role="user", content="a")) == scenario_id(Task(role="user", content="a"))


async def test_slow_rollouts_run_concurrently_up_to_the_limit() -> None:
    recorder = Recorder()
    start = time.monotonic()
    groups = await aa.run_groups(
        recorder, [{"q": i, "sleep": 0.2} for i in range(4)], n=2, max_concurrency=4, progress=False
    )
    elapsed = time.monotonic() - start
    assert sum(len(g) for g in groups) == 8
    assert recorder.max_running == 4
    # max_running is the exact check; the clock only rules out running them one by one (1.6 s).
    assert elapsed < 1.4, f"8 x 0.2 s rollouts at concurrency 4 took {elapsed:.2f} s"


async def test_failed_rollouts_are_kept_with_tracebacks() -> None:
    scenarios = [{"q": "ok"}, {"q": "bad", "fail": True}]
    groups = await aa.run_groups(Recorder(), scenarios, n=2, config=tolerate(2), progress=False)
    good, bad = groups
    assert len(good) == 2 and good.exceptions == []
    assert len(bad) == 0 and len(bad.exceptions) == 2
    failure = bad.exceptions[0]
    assert failure.type == "builtins.ValueError"
    assert failure.message == "scenario bad is broken"
    assert "in __call__" in failure.traceback and "ValueError" in failure.traceback
    assert failure.scenario_id == bad.metadata["scenario_id"]
    assert sorted(e.rollout_index for e in bad.exceptions) == [0, 1]
    # JSON round trip keeps the failures.
    assert (
        aa.TrajectoryGroup.model_validate_json(bad.model_dump_json()).exceptions[0].message == failure.message
    )


async def test_hanging_rollout_times_out_and_is_cancelled() -> None:
    recorder = Recorder()
    start = time.monotonic()
    groups = await aa.run_groups(
        recorder,
        [{"q": "hang", "sleep": 3600}, {"q": "fast"}],
        n=2,
        timeout_s=0.3,
        max_failure_rate=0.5,
        progress=False,
    )
    assert time.monotonic() - start < 2
    hang, fast = groups
    assert len(fast) == 2
    assert [e.type for e in hang.exceptions] == ["builtins.TimeoutError"] * 2
    assert "timeout_s=0.3" in hang.exceptions[0].message
    assert recorder.cancelled == 2 and recorder.running == 0


async def test_budget_exceeded_raises_and_cancels_the_rest() -> None:
    recorder = Recorder()
    scenarios = [{"q": "bad", "fail": True}] + [{"q": f"slow{i}", "sleep": 3600} for i in range(3)]
    start = time.monotonic()
    with pytest.raises(aa.RolloutBudgetError) as info:
        await aa.run_groups(recorder, scenarios, n=2, config=tolerate(1), progress=False)
    assert time.monotonic() - start < 2
    error = info.value
    assert isinstance(error, aa.RolloutError)
    assert error.budget == 1 and error.total == 8 and len(error.exceptions) == 2
    assert "2 of 8 rollouts failed" in str(error) and "max_failures=1" in str(error)
    assert "scenario bad is broken" in str(error)
    assert recorder.cancelled == 6 and recorder.running == 0


@pytest.mark.parametrize(
    ("settings", "failures", "raises"),
    [
        ({"max_failures": 0}, 1, True),
        ({"max_failure_rate": 0.25}, 2, False),
        ({"max_failure_rate": 0.25}, 3, True),
        ({"max_failures": 3, "max_failure_rate": None}, 3, False),
        ({"max_failures": 3, "max_failure_rate": None}, 4, True),
        ({"max_failures": None, "max_failure_rate": None}, 8, False),  # neither set: unlimited
        ({}, 1, True),  # the default: 10% of 8 rollouts tolerates 0
    ],
)
async def test_budget_counts_and_fractions(settings: dict[str, Any], failures: int, raises: bool) -> None:
    scenarios = [{"q": f"s{i}", "fail": i < failures} for i in range(8)]
    if raises:
        with pytest.raises(aa.RolloutBudgetError):
            await aa.run_groups(Recorder(), scenarios, n=1, progress=False, **settings)
    else:
        groups = await aa.run_groups(Recorder(), scenarios, n=1, progress=False, **settings)
        assert sum(len(g.exceptions) for g in groups) == failures


@pytest.mark.parametrize(
    ("settings", "budget", "exceeded"),
    [
        ({"max_failures": 3, "max_failure_rate": 0.25}, 2, "max_failure_rate"),  # 25% of 8 = 2 < 3
        ({"max_failures": 1, "max_failure_rate": 0.5}, 1, "max_failures"),  # 1 < 50% of 8
    ],
)
async def test_the_stricter_budget_applies_and_is_named(
    settings: dict[str, Any], budget: int, exceeded: str
) -> None:
    scenarios = [{"q": f"s{i}", "fail": i < 3} for i in range(8)]
    with pytest.raises(aa.RolloutBudgetError) as info:
        await aa.run_groups(Recorder(), scenarios, n=1, max_concurrency=1, progress=False, **settings)
    assert info.value.budget == budget and info.value.setting == exceeded
    assert f"{exceeded}={settings[exceeded]!r}" in str(info.value)


async def test_settings_override_the_config_object() -> None:
    config = aa.RunConfig(max_concurrency=1, max_failures=0)
    recorder = Recorder()
    scenarios = [{"q": i, "sleep": 0.05} for i in range(4)]
    await aa.run_groups(recorder, scenarios, n=1, config=config, progress=False)
    assert recorder.max_running == 1
    recorder = Recorder()
    await aa.run_groups(recorder, scenarios, n=1, config=config, max_concurrency=4, progress=False)
    assert recorder.max_running == 4
    bad = [{"q": "bad", "fail": True}, {"q": "ok"}]
    with pytest.raises(aa.RolloutBudgetError, match="max_failures=0"):
        await aa.run_groups(Recorder(), bad, n=1, config=config, progress=False)
    groups = await aa.run_groups(
        Recorder(), bad, n=1, config=config, max_failures=1, max_failure_rate=None, progress=False
    )
    assert [len(g.exceptions) for g in groups] == [1, 0]
    assert config.max_failures == 0  # the caller's config is unchanged


async def test_max_exceptions_is_gone_with_a_pointer_to_its_replacements() -> None:
    with pytest.raises(ConfigError, match="max_exceptions") as info:
        await aa.run_groups(Recorder(), [{"q": 1}], n=1, max_exceptions=3, progress=False)
    assert "max_failures" in str(info.value) and "max_failure_rate" in str(info.value)


async def test_retries_recover_flaky_rollouts() -> None:
    recorder = Recorder()
    groups = await aa.run_groups(
        recorder, [{"q": "f", "flaky": True}], n=1, retries=1, max_failures=0, progress=False
    )
    (trajectory,) = groups[0].trajectories
    assert trajectory.metadata["attempts"] == 2 and recorder.calls["f"] == 2
    assert any("ConnectionError" in line for line in trajectory.logs)

    with pytest.raises(aa.RolloutBudgetError, match="flaky tool server"):
        await aa.run_groups(
            Recorder(), [{"q": "f", "flaky": True}], n=1, retries=0, max_failures=0, progress=False
        )

    groups = await aa.run_groups(
        Recorder(), [{"q": "b", "fail": True}], n=1, retries=2, config=tolerate(1), progress=False
    )
    (failure,) = groups[0].exceptions
    assert failure.model_extra["attempts"] == 3 and len(failure.model_extra["previous_failures"]) == 2


async def test_cancelling_the_caller_cancels_every_rollout() -> None:
    recorder = Recorder()
    task = asyncio.create_task(
        aa.run_groups(recorder, [{"q": i, "sleep": 3600} for i in range(3)], n=2, progress=False)
    )
    await asyncio.sleep(0.1)
    assert recorder.running == 6
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert recorder.cancelled == 6 and recorder.running == 0


async def test_progress_callback_sees_done_total_reward_and_exceptions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen: list[RunProgress] = []
    scenarios = [{"q": "a", "reward": 0.2}, {"q": "b", "reward": 0.6}, {"q": "c", "fail": True}]
    await aa.run_groups(
        Recorder(), scenarios, n=2, max_concurrency=1, config=tolerate(2), progress=seen.append
    )
    assert [p.done for p in seen] == [1, 2, 3, 4, 5, 6]
    final = seen[-1]
    assert (final.total, final.succeeded, final.exceptions) == (6, 4, 2)
    assert final.mean_reward == pytest.approx(0.4)
    # progress=True draws nothing when stderr is not a terminal (as under pytest).
    await aa.run_groups(Recorder(), scenarios[:1], n=2, progress=True)
    assert capsys.readouterr().err == ""


async def test_wrong_return_type_is_a_recorded_failure() -> None:
    async def returns_dict(scenario: Any) -> Any:
        return {"messages": []}

    groups = await aa.run_groups(returns_dict, [{"q": 1}], n=2, config=tolerate(2), progress=False)
    assert [e.type for e in groups[0].exceptions] == ["builtins.TypeError"] * 2
    assert "must return an art_adapters.Trajectory" in groups[0].exceptions[0].message


async def test_partial_trajectory_on_the_exception_is_kept() -> None:
    class GraphFailed(RuntimeError):
        def __init__(self, trajectory: aa.Trajectory) -> None:
            super().__init__("graph crashed after one turn")
            self.trajectory = trajectory

    async def rollout(scenario: Any) -> aa.Trajectory:
        raise GraphFailed(_trajectory({"q": "partial"}, reward=None))

    groups = await aa.run_groups(rollout, [{"q": 1}], n=1, config=tolerate(1), progress=False)
    (failure,) = groups[0].exceptions
    assert failure.trajectory is not None and failure.trajectory.messages[0].content == "partial"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 0}, "n must be"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": 2.5}, "max_concurrency"),
        ({"max_failure_rate": 1.5}, "max_failure_rate"),
        ({"max_failure_rate": float("nan")}, "max_failure_rate"),
        ({"max_failures": -1}, "max_failures"),
        ({"max_failures": True}, "max_failures"),
        ({"max_failures": 1.5}, "max_failures"),
        ({"retries": -1}, "retries"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"max_concurrenc": 2}, "max_concurrenc"),  # a misspelt setting
        ({"config": {"max_concurrency": 2}}, "RunConfig"),
    ],
)
async def test_bad_arguments_are_config_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        await aa.run_groups(Recorder(), [{"q": 1}], **{"progress": False, **kwargs})


async def test_sync_rollout_function_is_rejected_clearly() -> None:
    def not_async(scenario: Any) -> aa.Trajectory:
        return _trajectory(scenario)

    with pytest.raises(ConfigError, match="async def rollout"):
        await aa.run_groups(not_async, [{"q": 1}], n=2, progress=False)


async def test_run_groups_sync_works_inside_a_running_loop() -> None:
    asyncio.get_running_loop()  # this test body runs under the session's event loop
    groups = aa.run_groups_sync(Recorder(), [{"q": 1}, {"q": 2}], n=2, progress=False)
    assert [len(g) for g in groups] == [2, 2]


def test_run_groups_sync_in_a_plain_script() -> None:
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    groups = aa.run_groups_sync(Recorder(), [{"q": 1}], n=3, progress=False)
    assert [t.metadata["rollout_index"] for t in groups[0].trajectories] == [0, 1, 2]


async def test_progress_bar_on_a_terminal_shows_done_total_reward_exceptions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    scenarios = [{"q": "a", "reward": 0.2}, {"q": "b", "reward": 0.6}, {"q": "c", "fail": True}]
    await aa.run_groups(Recorder(), scenarios, n=2, max_concurrency=1, config=tolerate(2), progress=True)
    final = terminal.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    assert "rollouts" in final and "6/6" in final
    assert "reward=0.400" in final and "exceptions=2" in final


async def test_no_scenarios_no_groups() -> None:
    assert await aa.run_groups(Recorder(), [], n=4, progress=True) == []


async def test_one_trajectory_object_returned_twice_gets_unique_ids() -> None:
    shared = _trajectory({"q": "same"})

    async def rollout(scenario: Any) -> aa.Trajectory:
        return shared

    groups = await aa.run_groups(rollout, [{"q": 1}, {"q": 2}], n=2, progress=False)
    ids = [t.id for g in groups for t in g.trajectories]
    assert len(set(ids)) == 4 and shared.id in ids
    assert [t.metadata["rollout_index"] for t in groups[0].trajectories] == [0, 1]
    assert shared.metadata == {}  # the caller's object is not modified


async def test_a_cancelled_error_from_inside_a_rollout_is_a_failure_not_a_cancelled_run() -> None:
    # The rollout awaits a task that something else cancelled (a library shutting a helper task down):
    # nobody cancelled run_groups, so the other rollouts must finish and the failure be kept as data.
    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        if scenario["q"] == "bad":
            helper = asyncio.create_task(asyncio.sleep(10))
            await asyncio.sleep(0)
            helper.cancel()
            await helper
        return _trajectory(scenario)

    scenarios = [{"q": "ok"}, {"q": "bad"}]
    groups = await aa.run_groups(rollout, scenarios, n=2, config=tolerate(2), progress=False)
    assert [len(g.trajectories) for g in groups] == [2, 0]
    failure = groups[1].exceptions[0]
    assert failure.type.endswith("RolloutError") and "CancelledError" in failure.message
    assert "await helper" in failure.traceback  # where it came from


def test_a_budget_set_alone_has_one_meaning() -> None:
    # A count set alone is the budget (the default rate gives way); a rate set alone too; both: the stricter.
    assert aa.RunConfig(max_failures=3).budget(16) == (3, "max_failures")
    assert aa.RunConfig(max_failure_rate=0.5).budget(16) == (8, "max_failure_rate")
    assert aa.RunConfig(max_failures=3, max_failure_rate=0.1).budget(16) == (1, "max_failure_rate")
    assert aa.RunConfig().budget(16) == (1, "max_failure_rate")
    assert aa.RunConfig(max_failure_rate=None).budget(16) == (None, None)
    # Laying settings over a config keeps what the config left at its default a default.
    loop = aa.LoopConfig(steps=1, run=aa.RunConfig(max_failures=3))
    assert loop.run.budget(100) == (3, "max_failures")
