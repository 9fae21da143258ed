"""The training loop scored by a RULER ensemble: ``ruler_scorer(judges=[...])`` and
``combined_scorer(judges=[...])`` on the backend app (fake engine and trainer), with two scripted
judges over HTTP on 127.0.0.1 that score by what they read.

One judge agrees with the verifiable brevity reward (shorter is better), the other rewards length,
so on replies of different lengths they disagree by an amount the test computes from the replies
themselves: each train row's ``judge_agreement_mean`` must be the mean of ``1 - |brief - long|``
over the step's rollouts. A judge changed between steps (its temperature) must be warned once by
the scorer's own judge-change monitor, which lives as long as the scorer (one run).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from art_adapters import ConfigError, TrainableModel
from art_adapters._batch_store import BatchStore
from art_adapters._loop import StepReport, train_loop
from art_adapters._scorers import combined_scorer, ruler_scorer
from art_adapters._trajectory import load_groups
from art_adapters.observe._metrics import MetricsHistory
from art_adapters.ruler import JudgeChangeMonitor
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.judge_server import JudgeServer
from tests.helpers.scripted_judges import BREVITY_RULE, LENGTH_RULE, judge_by
from tests.loop.test_loop import brevity, loop_config, make_rollout, scenarios


def brief_score(text: str) -> float:
    """What the brief judge gives a reply (it agrees with the verifiable brevity reward)."""
    return BREVITY_RULE({}, text)


def long_score(text: str) -> float:
    """What the length-loving judge gives a reply (60 characters or more: 1)."""
    return max(0.0, min(1.0, LENGTH_RULE({}, text)))


@pytest.fixture
def judges() -> Iterator[tuple[ChatOpenAI, ChatOpenAI]]:
    """The brief judge and the length-loving judge, each a ChatOpenAI on its own scripted server."""
    with JudgeServer() as brief, JudgeServer() as long:
        brief.reset(default=judge_by(BREVITY_RULE))  # type: ignore[arg-type]
        long.reset(default=judge_by(LENGTH_RULE))  # type: ignore[arg-type]
        yield (
            ChatOpenAI(base_url=brief.url, api_key="t", model="brief", max_retries=0, temperature=0),
            ChatOpenAI(base_url=long.url, api_key="t", model="long", max_retries=0, temperature=0),
        )


def _reply(trajectory: Any) -> str:
    return trajectory.messages[-1].content or ""


async def test_an_ensemble_scores_the_loop_and_each_row_carries_the_judges_agreement(
    fake_backend: FakeBackend, tmp_path: Path, judges: tuple[ChatOpenAI, ChatOpenAI]
) -> None:
    model = TrainableModel(name="ensemble-loop", project="loop-tests")
    await model.register(fake_backend)
    monitor = JudgeChangeMonitor(run="ensemble-loop")
    score = combined_scorer(
        reward=brevity, judges=list(judges), weight=1.0, monitor=monitor, cache=False, max_retries=0
    )
    result = await train_loop(
        model, make_rollout(model), scenarios("e", 4), score=score,
        config=loop_config(tmp_path, steps=2, eval_every=0),
    )  # fmt: skip
    assert result.stopped is None and result.final_step == 2
    rows = MetricsHistory(tmp_path).rows("train")
    assert [r["step"] for r in rows] == [1, 2]
    store = BatchStore(tmp_path)
    for batch, row in enumerate(rows):
        groups = load_groups(store.path(batch, scored=True))
        replies = [_reply(t) for g in groups for t in g.trajectories]
        assert len(replies) == 12 and len({len(r.strip()) for r in replies}) > 1  # the judges differ somewhere
        expected = statistics.fmean(1 - abs(brief_score(r) - long_score(r)) for r in replies)
        assert row["judge_agreement_mean"] == pytest.approx(expected, abs=1e-6)
        assert -1.0 <= row["calibration_spearman"] <= 1.0  # RULER vs the verifiable reward, kept beside it
        for group in groups:
            ruler = group.metadata["ruler"]
            assert ruler["status"] == "scored" and ruler["aggregate"] == "mean" and "kendall_tau" in ruler
            assert [j["model"] for j in ruler["judges"]] == ["brief", "long"]
            for trajectory in group.trajectories:
                reply = _reply(trajectory)
                verdicts = {v["judge"]: v["score"] for v in trajectory.metadata["ruler_judges"]}
                assert sorted(verdicts.values()) == pytest.approx(sorted([brief_score(reply), long_score(reply)]))
                assert trajectory.reward == pytest.approx((brief_score(reply) + long_score(reply)) / 2)
                assert trajectory.metrics["independent_reward"] == pytest.approx(brief_score(reply))
    assert monitor.changes == [] and [j["model"] for j in monitor.baseline or []] == ["brief", "long"]


async def test_a_judge_changed_mid_run_is_warned_once_by_the_scorers_own_monitor(
    fake_backend: FakeBackend,
    tmp_path: Path,
    judges: tuple[ChatOpenAI, ChatOpenAI],
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = TrainableModel(name="ensemble-change", project="loop-tests")
    await model.register(fake_backend)
    brief, long = judges
    score = ruler_scorer(judges=[brief, long], cache=False, max_retries=0)  # no monitor passed: its own

    def change_after_first(report: StepReport) -> None:
        if report.step == 1:
            long.temperature = 0.7  # the same model sampled otherwise: another judge

    with caplog.at_level(logging.WARNING, logger="art_adapters.ruler"):
        result = await train_loop(
            model, make_rollout(model), scenarios("c", 6), score=score,
            config=loop_config(tmp_path, steps=3, eval_every=0), on_step=change_after_first,
        )  # fmt: skip
    assert result.final_step == 3
    changed = [r.getMessage() for r in caplog.records if "RULER judge changed mid-run" in r.getMessage()]
    assert len(changed) == 1  # at step 2's first group; step 3, judged the same new way, is not news
    assert "long" in changed[0]
    rows = MetricsHistory(tmp_path).rows("train")
    assert all(0.0 <= r["judge_agreement_mean"] <= 1.0 for r in rows) and len(rows) == 3


def test_a_scorer_takes_exactly_one_of_judge_and_judges(judges: tuple[ChatOpenAI, ChatOpenAI]) -> None:
    brief, long = judges
    with pytest.raises(ConfigError, match="ruler_scorer needs exactly one of judge= .* got neither"):
        ruler_scorer()
    with pytest.raises(ConfigError, match="exactly one of judge= .* got both"):
        ruler_scorer(brief, judges=[long])
    with pytest.raises(ConfigError, match="combined_scorer needs exactly one of judge="):
        combined_scorer(reward=brevity)
    with pytest.raises(ConfigError, match="non-empty list of judges .* got an empty list"):
        ruler_scorer(judges=[])
    with pytest.raises(ConfigError, match="got ChatOpenAI; for one judge pass judge="):
        ruler_scorer(judges=brief)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"judges 0 and 1 are the same judge \(brief\).*samples=k"):
        ruler_scorer(judges=[brief, brief.model_copy()])
    with pytest.raises(ConfigError, match="combined_scorer needs reward="):
        combined_scorer(judges=[brief, long])
    assert callable(ruler_scorer(judges=[brief, long], samples=2)) and callable(ruler_scorer(brief))
