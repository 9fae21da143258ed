"""Every path that exports scores names the judges (issue 16): scores logged on live traces (the
training loop's path), scores logged later with ``log_scores``, and Langfuse scores (their metadata).

Needs the Observer to pass the group's judges on (``group.metadata["ruler"]["judges"]``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import art_adapters as aa
from art_adapters import observe
from art_adapters.observe import RolloutTracing
from tests.helpers.judge_server import JudgeServer
from tests.observe.test_dimension_scores import (
    DIMENSIONS,
    chat,
    memory_observer,
    quiz,
    scores_by_trajectory,
    servers,  # noqa: F401 - the module's scripted judges (a fixture)
)
from tests.observe.test_observe_export import Recorder
from tests.ruler.test_score import SYSTEM, USER, answer


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.server.close()


async def test_live_traces_and_later_scores_name_a_single_judge_in_full(
    servers: dict[str, JudgeServer], tmp_path: Path  # noqa: F811
) -> None:
    endings = [answer("The answer is 5."), answer("It is 7.")]

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        index, scenario["calls"] = scenario["calls"], scenario["calls"] + 1
        prefix = [aa.Message(role="system", content=SYSTEM), aa.Message(role="user", content=USER)]
        return aa.Trajectory(messages=[*prefix, *endings[index % 2]])

    observer, exporter = memory_observer()
    tracing = RolloutTracing(observer=observer, step=0, keep_open=True)
    groups = await aa.run_groups(
        rollout, [{"id": "add", "calls": 0}], n=2, max_concurrency=1, progress=False, tracing=tracing
    )
    (scored,) = await aa.ruler_score_groups(
        groups, judge=chat(servers, "graded"), dimensions=DIMENSIONS, cache=tmp_path
    )
    observer.log_rollouts([scored], step=0)
    live = scores_by_trajectory(exporter.get_finished_spans())
    exporter.clear()
    assert observer.log_scores(scored) == 2 * 4
    later = scores_by_trajectory(exporter.get_finished_spans())
    observer.shutdown()

    (identity,) = scored.metadata["ruler"]["judges"]
    for by_trajectory in (live, later):
        for trajectory in scored.trajectories:
            spans = by_trajectory[trajectory.id]
            assert set(spans) == {"ruler", "reward", "ruler.correctness", "ruler.brevity"}
            for span in spans.values():
                assert tuple(span.attributes["art_adapters.judge.models"]) == ("graded",)
                assert json.loads(span.attributes["art_adapters.judges"]) == [identity]


async def test_langfuse_scores_carry_the_dimensions_and_the_judges(
    servers: dict[str, JudgeServer], recorder: Recorder, tmp_path: Path  # noqa: F811
) -> None:
    judges = [chat(servers, "cautious"), chat(servers, "contrary")]
    scored = await aa.ruler_score_group(quiz(), judges=judges, dimensions=DIMENSIONS, cache=tmp_path)
    observer = observe.configure_langfuse("pk-lf-test", "sk-lf-test", recorder.url, run="lf-dims")
    observer.log_rollouts([scored], step=1)
    observer.shutdown()
    scores: list[dict[str, Any]] = []
    for path, body in recorder.posts:
        if path.endswith("/scores"):
            batch = json.loads(body)
            scores.extend(batch if isinstance(batch, list) else batch.get("scores", [batch]))
    ids = [j["id"] for j in scored.metadata["ruler"]["judges"]]
    names = sorted({s["name"] for s in scores})
    assert names == ["judge_agreement", "reward", "ruler", "ruler.brevity", "ruler.correctness"]
    assert len(scores) == 5 * len(scored.trajectories)
    for score in scores:
        assert score["metadata"]["judge_ids"] == ids
        assert score["metadata"]["judge_models"] == ["cautious", "contrary"]
