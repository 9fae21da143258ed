"""The typed records of what a RULER pass leaves (GroupJudgement, TrajectoryJudgement): read from groups
scored by scripted judges on 127.0.0.1, written back to the very same JSON, None where no judge scored,
and a clear error for stored metadata of the wrong shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import art_adapters as aa
from art_adapters._errors import ConfigError
from art_adapters.ruler import GroupJudgement, JudgeVerdict, TrajectoryJudgement, judge_identity
from tests.ruler.conftest import ScriptedJudge
from tests.ruler.test_ensemble import quiz


def stored(group: aa.TrajectoryGroup) -> str:
    """The group as it is saved: the JSON the records must leave unchanged."""
    return group.model_dump_json()


def rewritten(group: aa.TrajectoryGroup) -> aa.TrajectoryGroup:
    """A copy of ``group`` whose records were read and written back (by the models alone)."""
    copy = aa.TrajectoryGroup.model_validate_json(stored(group))
    judgement = GroupJudgement.read(copy)
    assert judgement is not None
    judgement.write(copy)
    for trajectory in copy.trajectories:
        judged = TrajectoryJudgement.read(trajectory)
        assert judged is not None
        judged.write(trajectory)
    return copy


async def test_a_single_judges_pass_reads_typed_and_round_trips_to_the_same_json(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    judge = scripted["cautious"].model
    scored = await aa.ruler_score_group(quiz(), judge=judge, cache=tmp_path, per_turn=True)

    judgement = GroupJudgement.read(scored)
    assert judgement is not None and judgement.is_scored and judgement.status == "scored"
    assert judgement.judges == [judge_identity(judge)]
    assert judgement.judge_ids == (judge_identity(judge)["id"],)
    assert judgement.per_turn is True and judgement.attempts == 1 and judgement.cache_hit is False
    assert judgement.aggregate is None and judgement.kendall_tau is None and judgement.dimensions is None

    first = TrajectoryJudgement.read(scored.trajectories[0])
    assert first is not None
    assert first.score == 0.6 == scored.trajectories[0].reward  # cautious: 0.6 for the right answer
    assert first.independent_reward == 1.0 and first.label == "t1" and first.explanation == "judged t1"
    assert first.turn_scores == [0.6] and first.dimensions == {}
    assert first.agreement is None and first.verdicts is None

    assert stored(rewritten(scored)) == stored(scored)


async def test_an_ensemble_with_dimensions_reads_typed_and_round_trips(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    judges = [scripted["cautious"].model, scripted["contrary"].model]
    dimensions = {"correctness": 2.0, "brevity": 1.0}
    scored = await aa.ruler_score_group(quiz(), judges=judges, cache=tmp_path, dimensions=dimensions)

    judgement = GroupJudgement.read(scored)
    assert judgement is not None and judgement.is_scored
    assert judgement.aggregate == "mean" and judgement.cache_hits == 0 and judgement.dimensions == dimensions
    assert judgement.kendall_tau == pytest.approx(-1.0)  # the two judges order the group oppositely
    assert [j["model"] for j in judgement.judges] == ["cautious", "contrary"]

    right = TrajectoryJudgement.read(scored.trajectories[0])
    assert right is not None and right.verdicts is not None
    assert [type(v) for v in right.verdicts] == [JudgeVerdict, JudgeVerdict]
    assert [v.judge for v in right.verdicts] == list(judgement.judge_ids)
    assert [v.score for v in right.verdicts] == pytest.approx([0.6, 0.1])
    assert right.verdicts[0].dimensions == {"correctness": 0.6, "brevity": 0.6}
    assert right.dimensions == pytest.approx({"correctness": 0.35, "brevity": 0.35})
    assert right.score == pytest.approx(0.35) and right.agreement == pytest.approx(0.5)

    assert stored(rewritten(scored)) == stored(scored)


async def test_an_unscored_group_reads_its_reason_and_an_unjudged_one_reads_none(
    scripted: dict[str, ScriptedJudge], tmp_path: Path
) -> None:
    empty = aa.TrajectoryGroup(trajectories=[])
    failed = await aa.ruler_score_group(empty, judge=scripted["cautious"].model, cache=tmp_path)
    judgement = GroupJudgement.read(failed)
    assert judgement is not None and not judgement.is_scored and judgement.status == "unscored"
    assert judgement.reason is not None and "no trajectories to score" in judgement.reason
    assert judgement.attempts is None  # never set: not stored either
    assert set(failed.metadata["ruler"]) == {"status", "reason", "judge", "judges"}
    assert stored(rewritten(failed)) == stored(failed)

    plain = quiz()
    assert GroupJudgement.read(plain) is None
    assert [TrajectoryJudgement.read(t) for t in plain.trajectories] == [None, None, None]


def test_a_record_from_an_older_version_reads_and_keeps_what_it_does_not_know() -> None:
    record = {"status": "scored", "judge": "ChatOpenAI:j", "later": [1]}
    group = aa.TrajectoryGroup(metadata={"ruler": dict(record)})
    judgement = GroupJudgement.read(group)
    assert judgement is not None and judgement.judges == [] and judgement.judge_ids == ()
    judgement.write(group)
    assert group.metadata["ruler"] == record


@pytest.mark.parametrize(
    ("metadata", "names"),
    [
        ({"ruler": "scored"}, "metadata['ruler']"),
        ({"ruler": {"status": "maybe"}}, "status"),
        ({"ruler": {"judges": "judge-a"}}, "judges"),
    ],
)
def test_a_malformed_group_record_is_a_config_error_naming_the_group_and_field(
    metadata: dict[str, object], names: str
) -> None:
    group = aa.TrajectoryGroup(id="g-7", metadata=metadata)
    with pytest.raises(ConfigError, match="group g-7") as raised:
        GroupJudgement.read(group)
    assert names in str(raised.value) and "not what a RULER pass writes" in str(raised.value)


def test_a_malformed_trajectory_record_is_a_config_error_and_a_missing_score_is_none() -> None:
    bad = aa.Trajectory(id="t-9", metrics={"ruler_score": 0.5}, metadata={"turn_rewards": "0.5"})
    with pytest.raises(ConfigError, match=r"trajectory t-9.*metadata\['turn_rewards'\]"):
        TrajectoryJudgement.read(bad)
    # no numeric score: no judge scored it, whatever else is there
    assert TrajectoryJudgement.read(aa.Trajectory(metrics={"ruler_score": True})) is None
    assert TrajectoryJudgement.read(aa.Trajectory(metadata={"turn_rewards": [1.0]})) is None


def test_write_keeps_the_first_reward_and_hand_set_turn_rewards_and_drops_ensemble_leftovers() -> None:
    trajectory = aa.Trajectory(metadata={"turn_rewards": [0.2]}, reward=1.0)
    verdict = JudgeVerdict(judge="abc", score=0.4, explanation="meh", sample=1)
    ensemble = TrajectoryJudgement(score=0.4, independent_reward=1.0, agreement=0.9, verdicts=[verdict])
    ensemble.write(trajectory)
    assert trajectory.metrics == {"independent_reward": 1.0, "ruler_score": 0.4, "judge_agreement": 0.9}
    entry = {"judge": "abc", "score": 0.4, "explanation": "meh", "sample": 1}
    assert trajectory.metadata["ruler_judges"] == [entry]

    TrajectoryJudgement(score=0.7, explanation="better", dimensions={"brevity": 0.5}).write(trajectory)
    assert trajectory.metrics == {"independent_reward": 1.0, "ruler_score": 0.7, "ruler_brevity": 0.5}
    assert trajectory.metadata == {"turn_rewards": [0.2], "ruler_explanation": "better"}
    assert json.loads(trajectory.model_dump_json())["metrics"]["ruler_brevity"] == 0.5

    TrajectoryJudgement.forget_dimensions(trajectory, ["brevity"])
    assert "ruler_brevity" not in trajectory.metrics
    TrajectoryJudgement.forget(trajectory)
    assert trajectory.metrics == {} and trajectory.reward == 1.0
