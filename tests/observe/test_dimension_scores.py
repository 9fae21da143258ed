"""Every RULER score reaches the traces as its own score, naming its judge (issue 16).

Groups are scored for real by scripted judges, each an OpenAI-compatible HTTP server on 127.0.0.1,
and exported by an :class:`~art_adapters.observe.Observer` through the OpenTelemetry SDK into an
in-memory exporter: each rubric dimension (``ruler.<dimension>``) and an ensemble's agreement
(``judge_agreement``) are evaluator spans of their own beside ``ruler`` and ``reward``, and every
score a judge gave carries that judge's identity (``group.metadata["ruler"]["judges"]``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import art_adapters as aa
from art_adapters.observe import ObserveConfig, Observer, RolloutTracing
from tests.helpers.judge_server import JudgeServer
from tests.helpers.scripted_judges import judge_dimensions
from tests.ruler.conftest import cautious, contrary, is_correct, verdict_by
from tests.ruler.test_score import SYSTEM, USER, answer, make_group

DIMENSIONS = {"correctness": 3.0, "brevity": 1.0}

#: The attributes of a score span before issue 16 (a score without a judge identity has exactly these).
PLAIN_SCORE_KEYS = {
    "langfuse.observation.type",
    "langfuse.observation.output",
    "gen_ai.evaluation.name",
    "gen_ai.evaluation.score.value",
    "art_adapters.score.name",
    "art_adapters.score.value",
    "art_adapters.trajectory.id",
}


def graded(block: str) -> dict[str, float]:
    """Right answers are correct, short ones brief."""
    return {"correctness": 1.0 if is_correct(block) else 0.0, "brevity": 1.0 if len(block) < 100 else 0.25}


def agreeing(block: str) -> dict[str, float]:
    """Both dimensions as :func:`~tests.ruler.conftest.cautious` scores the block."""
    return {name: cautious(block) for name in DIMENSIONS}


def reversed_correctness(block: str) -> dict[str, float]:
    """Correctness as :func:`~tests.ruler.conftest.contrary` (the wrong answer high), brevity as
    :func:`graded`."""
    return {"correctness": contrary(block), "brevity": graded(block)["brevity"]}


def _correct(body: dict[str, Any], text: str) -> float:
    return 1.0 if "The answer is 5" in text else 0.0


def _brief(body: dict[str, Any], text: str) -> float:
    return 1.0 if len(text) < 40 else 0.25


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, JudgeServer]]:
    """One scripted judge per server: ``graded`` (one rule per dimension) and two that disagree."""
    made = {
        "graded": (JudgeServer().start(), judge_dimensions({"correctness": _correct, "brevity": _brief})),
        "cautious": (JudgeServer().start(), verdict_by(agreeing)),
        "contrary": (JudgeServer().start(), verdict_by(reversed_correctness)),
    }
    try:
        for server, default in made.values():
            server.reset(default=default)
        yield {name: server for name, (server, _) in made.items()}
    finally:
        for server, _ in made.values():
            server.stop()


def chat(servers: dict[str, JudgeServer], name: str) -> ChatOpenAI:
    """A LangChain judge of model ``name`` on its scripted server."""
    return ChatOpenAI(base_url=servers[name].url, api_key="test", model=name, max_retries=0, temperature=0)


def quiz() -> aa.TrajectoryGroup:
    """t1 right and short, t2 right and long-winded, t3 wrong and short (verifiable rewards 1, 1, 0)."""
    long_right = answer("Hmm, let me think about it, step by step, carefully. " * 3 + "The answer is 5.")
    return make_group(answer("The answer is 5."), long_right, answer("It is 7."), rewards=[1.0, 1.0, 0.0])


def memory_observer() -> tuple[Observer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    return Observer(ObserveConfig(run="dims"), span_processors=[SimpleSpanProcessor(exporter)]), exporter


def scores_by_trajectory(spans: Any) -> dict[str, dict[str, Any]]:
    """trajectory id -> score name -> its evaluator span."""
    out: dict[str, dict[str, Any]] = {}
    for span in spans:
        if span.attributes.get("langfuse.observation.type") == "evaluator":
            trajectory = span.attributes["art_adapters.trajectory.id"]
            out.setdefault(trajectory, {})[span.attributes["art_adapters.score.name"]] = span
    return out


async def test_each_dimension_is_its_own_score_naming_the_single_judge(
    servers: dict[str, JudgeServer], tmp_path: Path
) -> None:
    scored = await aa.ruler_score_group(
        quiz(), judge=chat(servers, "graded"), dimensions=DIMENSIONS, cache=tmp_path
    )
    (identity,) = scored.metadata["ruler"]["judges"]
    assert identity["model"] == "graded"
    observer, exporter = memory_observer()
    observer.log_rollouts([scored], step=1, model="calc@1")
    observer.shutdown()

    by_trajectory = scores_by_trajectory(exporter.get_finished_spans())
    assert set(by_trajectory) == {t.id for t in scored.trajectories}
    for trajectory in scored.trajectories:
        spans = by_trajectory[trajectory.id]
        # no agreement: one judge
        assert set(spans) == {"ruler", "reward", "ruler.correctness", "ruler.brevity"}
        for name in ("correctness", "brevity"):
            span = spans[f"ruler.{name}"]
            assert span.name == f"score ruler.{name}"
            value = trajectory.metrics[f"ruler_{name}"]
            assert span.attributes["art_adapters.score.value"] == value
            assert span.attributes["gen_ai.evaluation.name"] == f"ruler.{name}"
            assert span.attributes["gen_ai.evaluation.score.value"] == value
            comment = span.attributes["art_adapters.score.comment"]
            assert comment == f"{name} by graded (judge {identity['id']})"
            (event,) = span.events
            assert event.name == "gen_ai.evaluation.result"
            assert event.attributes["gen_ai.evaluation.name"] == f"ruler.{name}"
            assert tuple(event.attributes["art_adapters.judge.ids"]) == (identity["id"],)
        # RULER's score and the reward (RULER's here) are as before, plus who judged.
        ruler = spans["ruler"].attributes
        assert ruler["art_adapters.score.value"] == trajectory.metrics["ruler_score"] == trajectory.reward
        assert ruler["art_adapters.score.comment"] == trajectory.metadata["ruler_explanation"]
        for span in spans.values():
            attrs = span.attributes
            assert tuple(attrs["art_adapters.judge.ids"]) == (identity["id"],)
            assert tuple(attrs["art_adapters.judge.models"]) == ("graded",)
            assert json.loads(attrs["art_adapters.judges"]) == [identity]
            assert json.loads(attrs["langfuse.observation.metadata.judges"]) == [identity]
    right, verbose, wrong = scored.trajectories
    scores = by_trajectory[verbose.id]
    assert scores["ruler.correctness"].attributes["art_adapters.score.value"] == 1.0
    assert scores["ruler.brevity"].attributes["art_adapters.score.value"] == 0.25
    assert by_trajectory[wrong.id]["ruler.correctness"].attributes["art_adapters.score.value"] == 0.0


async def test_an_ensembles_dimensions_and_agreement_name_every_judge(
    servers: dict[str, JudgeServer], tmp_path: Path
) -> None:
    judges = [chat(servers, "cautious"), chat(servers, "contrary")]
    scored = await aa.ruler_score_group(quiz(), judges=judges, dimensions=DIMENSIONS, cache=tmp_path)
    identities = scored.metadata["ruler"]["judges"]
    ids = tuple(j["id"] for j in identities)
    assert [j["model"] for j in identities] == ["cautious", "contrary"] and len(set(ids)) == 2
    observer, exporter = memory_observer()
    observer.log_rollouts([scored], step=2)
    observer.shutdown()

    by_trajectory = scores_by_trajectory(exporter.get_finished_spans())
    for trajectory in scored.trajectories:
        spans = by_trajectory[trajectory.id]
        assert set(spans) == {"ruler", "reward", "ruler.correctness", "ruler.brevity", "judge_agreement"}
        agreement = spans["judge_agreement"].attributes
        assert agreement["art_adapters.score.value"] == trajectory.metrics["judge_agreement"]
        assert agreement["gen_ai.evaluation.name"] == "judge_agreement"
        verdicts = {v["judge"]: v["score"] for v in trajectory.metadata["ruler_judges"]}
        assert agreement["art_adapters.score.comment"] == (
            "1 - (max - min) of 2 judges' scores: "
            f"cautious (judge {ids[0]}) {verdicts[ids[0]]:.2f}; "
            f"contrary (judge {ids[1]}) {verdicts[ids[1]]:.2f}"
        )
        correctness = spans["ruler.correctness"].attributes
        assert correctness["art_adapters.score.value"] == trajectory.metrics["ruler_correctness"]
        assert correctness["art_adapters.score.comment"].startswith(
            f"correctness: mean of 2 judges: cautious (judge {ids[0]}) "
        )
        for span in spans.values():
            assert tuple(span.attributes["art_adapters.judge.ids"]) == ids
            assert tuple(span.attributes["art_adapters.judge.models"]) == ("cautious", "contrary")
            assert json.loads(span.attributes["art_adapters.judges"]) == identities
    # On the short right answer cautious gives 0.6, contrary (3 * 0.1 + 1 * 1.0) / 4 = 0.325.
    right = scored.trajectories[0]
    assert by_trajectory[right.id]["judge_agreement"].attributes["art_adapters.score.value"] == pytest.approx(
        1 - (0.6 - 0.325)
    )


async def test_scores_logged_on_live_traces_name_the_ensembles_judges(
    servers: dict[str, JudgeServer], tmp_path: Path
) -> None:
    """The training loop's path: rollouts traced live and kept open, scored, then logged."""
    endings = [answer("The answer is 5."), answer("It is 7."), answer("Well, it is 5, I think.")]

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        index = scenario["calls"]
        scenario["calls"] += 1
        prefix = [aa.Message(role="system", content=SYSTEM), aa.Message(role="user", content=USER)]
        return aa.Trajectory(messages=[*prefix, *endings[index % len(endings)]])

    observer, exporter = memory_observer()
    tracing = RolloutTracing(observer=observer, step=0, policy="calc@0", keep_open=True)
    groups = await aa.run_groups(
        rollout, [{"id": "add", "calls": 0}], n=3, max_concurrency=1, progress=False, tracing=tracing
    )
    judges = [chat(servers, "cautious"), chat(servers, "contrary")]
    scored = await aa.ruler_score_groups(groups, judges=judges, dimensions=DIMENSIONS, cache=tmp_path)
    observer.log_rollouts(scored, step=0, model="calc@0")
    observer.shutdown()

    ids = tuple(j["id"] for j in scored[0].metadata["ruler"]["judges"])
    spans = exporter.get_finished_spans()
    by_trajectory = scores_by_trajectory(spans)
    for trajectory in scored[0].trajectories:
        scores = by_trajectory[trajectory.id]
        assert set(scores) == {"ruler", "reward", "ruler.correctness", "ruler.brevity", "judge_agreement"}
        trace_id = int(trajectory.metadata["trace_id"], 16)
        assert all(s.context.trace_id == trace_id for s in scores.values())  # in the rollout's own trace
        for span in scores.values():
            assert tuple(span.attributes["art_adapters.judge.ids"]) == ids


def test_a_score_without_dimensions_or_judges_is_exported_as_before() -> None:
    """A trajectory scored before issue 16 (no dimensions, no judge identity): the two scores, unchanged."""
    trajectory = aa.Trajectory(
        messages=[aa.Message(role="user", content="hi"), aa.Message(role="assistant", content="hello")],
        reward=0.7,
        metrics={"ruler_score": 0.7, "independent_reward": 1.0},
        metadata={"ruler_explanation": "polite"},
    )
    observer, exporter = memory_observer()
    observer.log_rollouts([aa.TrajectoryGroup(trajectories=[trajectory])])
    observer.shutdown()
    scores = scores_by_trajectory(exporter.get_finished_spans())[trajectory.id]
    assert set(scores) == {"ruler", "reward"}
    for name, span in scores.items():
        extra = {"art_adapters.score.comment", "gen_ai.evaluation.explanation"}
        assert set(span.attributes) == PLAIN_SCORE_KEYS | extra, name
        assert span.attributes["art_adapters.score.comment"] == "polite"
        assert span.attributes["art_adapters.score.value"] == 0.7
