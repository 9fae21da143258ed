"""``art-adapters calibrate``: saved groups with verifiable rewards, scored by real judges over HTTP.

Two scripted judges on 127.0.0.1 (:mod:`tests.helpers.scripted_judges`): one scores answers as the
verifiable check does (the number nearest the sum), one scores length (and refuses one group). The
command's table and JSON rows must rank the first as agreeing and the second as disagreeing, with
the exact within-group Spearman rho and pairwise agreement worked out by hand below.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from art_adapters import Trajectory, TrajectoryGroup, save_groups
from art_adapters._calibration import Agreement, Calibration
from art_adapters._trajectory import Message
from art_adapters.apps import app
from art_adapters.apps._calibrate import CalibrationRow, calibration_table, reference_groups
from tests.helpers.judge_server import JudgeServer
from tests.helpers.scripted_judges import (
    LENGTH_RULE,
    SUM_RULE,
    closest_number,
    judge_dimensions,
    length_loving,
    sum_reward,
)

#: (question, answers): the first group orders short right answers above long wrong ones.
GROUPS = [
    ("What is 3 + 11?", [
        "14",
        "13",
        "I think that it is 11, after careful thought",
        "Let me explain at great length: the sum is surely 20, trust me on this one",
    ]),
    ("What is 100 + 1?", ["101", "100", "it is 7, said with many many extra words here"]),
]  # fmt: skip


def _groups() -> list[TrajectoryGroup]:
    out = []
    for question, answers in GROUPS:
        trajectories = [
            Trajectory(
                messages=[Message(role="user", content=question), Message(role="assistant", content=answer)],
                reward=sum_reward(question, answer),
            )
            for answer in answers
        ]
        out.append(TrajectoryGroup(trajectories=trajectories, metadata={"scenario_id": question}))
    return out


def _refuses_the_second_group(body: dict[str, Any]) -> dict[str, Any]:
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    return {"content": "no scores for this one"} if "100 + 1" in text else length_loving(body)


@pytest.fixture
def servers() -> Iterator[tuple[JudgeServer, JudgeServer]]:
    with JudgeServer() as agreeing, JudgeServer() as disagreeing:
        agreeing.reset(default=closest_number)
        disagreeing.reset(default=_refuses_the_second_group)
        yield agreeing, disagreeing


def test_the_table_ranks_the_agreeing_judge_above_the_length_loving_one(
    servers: tuple[JudgeServer, JudgeServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agreeing, disagreeing = servers
    groups_file = save_groups(tmp_path / "groups.jsonl", _groups())
    rubric = tmp_path / "strict.txt"
    rubric.write_text("Only the correct sum counts; length earns nothing.", encoding="utf-8")
    out = tmp_path / "rows.json"
    for name in ("ART_ADAPTERS_JUDGE_MODEL", "ART_ADAPTERS_JUDGE_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(
        app,
        [
            "calibrate", str(groups_file),
            "--judge-model", "agrees", "--judge-base-url", agreeing.url,
            "--judge-model", "loves-length", "--judge-base-url", disagreeing.url,
            "--judge-api-key", "test", "--rubric", str(rubric),
            "--max-retries", "0", "--no-cache", "--out", str(out),
        ],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    table = [line for line in result.output.splitlines() if "agrees" in line or "loves-length" in line]
    assert len(table) == 3  # two table rows and the unscored group's note
    assert "+1.00" in table[0] and "100%" in table[0] and "0 of 2" in table[0]
    assert "-0.95" in table[1] and "8%" in table[1] and "1 of 2" in table[1]
    assert "unscored" in table[2] and "loves-length" in table[2]

    rows = [CalibrationRow.model_validate(r) for r in json.loads(out.read_text(encoding="utf-8"))]
    agrees, loves = rows
    assert (agrees.rubric, loves.rubric) == ("strict.txt", "strict.txt")
    assert agrees.calibration is not None and loves.calibration is not None
    # agreeing: both groups ordered exactly as the reward (6 + 3 comparable pairs)
    assert agrees.calibration.overall == Agreement(spearman=1.0, pairwise=1.0, pairs=9, groups=2)
    # length-loving, first group only: judge ranks (1.5, 1.5, 3, 4) against reward ranks (4, 3, 2, 1):
    # rho = -4.5 / sqrt(4.5 * 5); of 6 pairs only (14, 13), a judge tie, earns 1/2.
    overall = loves.calibration.overall
    assert overall.spearman == pytest.approx(-4.5 / math.sqrt(22.5))
    assert overall.pairwise == pytest.approx(0.5 / 6) and overall.pairs == 6 and overall.groups == 1
    assert loves.unscored == 1 and "no valid scores" in loves.reasons[0]
    # every request carried the rubric, and each server judged both groups once
    for server in servers:
        assert len(server.requests) == 2
        assert all("length earns nothing" in r["messages"][0]["content"] for r in server.requests)


def test_rubric_dimensions_get_a_column_pair_each(tmp_path: Path) -> None:
    groups_file = save_groups(tmp_path / "groups.jsonl", _groups())
    rubric = tmp_path / "dimensions.json"
    rubric.write_text(json.dumps({"dimensions": {"correctness": 2, "length": 1}}), encoding="utf-8")
    out = tmp_path / "rows.json"
    with JudgeServer() as server:
        server.reset(default=judge_dimensions({"correctness": SUM_RULE, "length": LENGTH_RULE}))
        result = CliRunner().invoke(
            app,
            [
                "calibrate", str(groups_file), "--judge-model", "two-minds", "--judge-base-url", server.url,
                "--judge-api-key", "test", "--rubric", str(rubric), "--no-cache", "--out", str(out),
            ],
            env={"COLUMNS": "250"},
        )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    assert "correctness Spearman" in result.output and "length agreement" in result.output
    (row,) = [CalibrationRow.model_validate(r) for r in json.loads(out.read_text(encoding="utf-8"))]
    assert row.calibration is not None and row.rubric == "dimensions.json"
    dims = row.calibration.dimensions
    assert dims["correctness"] == Agreement(spearman=1.0, pairwise=1.0, pairs=9, groups=2)
    # length: the first group as in the test above; the second, judge ranks (1.5, 1.5, 3) against
    # reward ranks (3, 2, 1): rho = -1.5 / sqrt(1.5 * 2), its one judge tie (101, 100) earning 1/2
    assert dims["length"].spearman == pytest.approx((-4.5 / math.sqrt(22.5) - 1.5 / math.sqrt(3)) / 2)
    assert dims["length"].pairwise == pytest.approx(1 / 9) and dims["length"].pairs == 9


def test_groups_without_a_verifiable_reward_are_refused_with_what_to_do(tmp_path: Path) -> None:
    groups = _groups()
    for trajectory in groups[0].trajectories + groups[1].trajectories:
        trajectory.reward = None
    groups_file = save_groups(tmp_path / "groups.jsonl", groups)
    result = CliRunner().invoke(app, ["calibrate", str(groups_file), "--judge-model", "x"])
    assert result.exit_code == 2
    assert "no trajectory has a reward to calibrate against" in " ".join(result.output.split())


def test_a_group_scored_by_ruler_before_is_calibrated_against_the_reward_ruler_kept() -> None:
    (group, _) = _groups()
    first = group.trajectories[0]
    first.metrics.update({"ruler_score": 0.2, "independent_reward": 0.9, "ruler_correctness": 0.1})
    first.reward = 0.2
    (copy,) = reference_groups([group])
    assert copy.trajectories[0].reward == 0.9 and copy.trajectories[0].metrics == {}
    assert copy.trajectories[1].reward == group.trajectories[1].reward
    assert group.trajectories[0].reward == 0.2  # the input is unchanged


def test_the_table_has_two_columns_per_rubric_dimension() -> None:
    dims = {"correctness": Agreement(spearman=0.5, pairwise=0.75, pairs=4, groups=1)}
    rows = [
        CalibrationRow(judge="a", rubric="default", groups=1, calibration=Calibration(
            overall=Agreement(spearman=0.4, pairwise=0.7, pairs=4, groups=1), dimensions=dims, groups=1,
        )),
        CalibrationRow(judge="b", rubric="default", groups=1, unscored=1),
    ]  # fmt: skip
    table = calibration_table(rows)
    headers = [str(c.header) for c in table.columns]
    assert headers == [
        "judge", "rubric", "Spearman", "pairwise agreement", "pairs", "correctness Spearman",
        "correctness agreement", "unscored groups",
    ]  # fmt: skip
    cells = [list(c.cells) for c in table.columns]
    assert [col[0] for col in cells] == ["a", "default", "+0.40", "70%", "4", "+0.50", "75%", "0 of 1"]
    assert [col[1] for col in cells] == ["b", "default", "-", "-", "0", "-", "-", "1 of 1"]


def test_the_ruler_options_take_their_defaults_and_help_from_ruler_config() -> None:
    import typer

    from art_adapters.apps._calibrate import CalibrateCommand
    from art_adapters.apps._options import field_help
    from art_adapters.ruler import RulerConfig

    params = {p.name: p for p in typer.main.get_command(app).commands["calibrate"].params}
    for name in ("max_concurrency", "judge_timeout_s", "max_retries", "cache"):
        assert params[name].default == RulerConfig.model_fields[name].default, name
    for name in ("max_concurrency", "judge_timeout_s", "max_retries"):
        assert params[name].help == field_help(RulerConfig, name), name
    assert (params["max_concurrency"].min, params["max_retries"].min) == (1, 0)  # RulerConfig's bounds
    assert params["cache"].opts == ["--cache"] and params["cache"].secondary_opts == ["--no-cache"]
    for name in ("judge_model", "judge_base_url", "judge_api_key", "rubric", "out"):
        assert params[name].help == CalibrateCommand.model_fields[name].description, name
        assert params[name].opts == ["--" + name.replace("_", "-")], name
    assert params["judge_model"].multiple and params["groups_file"].required


def test_the_ruler_options_reach_the_ruler_config_of_every_pass() -> None:
    import typer

    from art_adapters.apps._calibrate import CALIBRATE_OPTIONS, CalibrateCommand
    from art_adapters.apps._options import build_config

    command = typer.main.get_command(app).commands["calibrate"]
    argv = ["g.jsonl", "--judge-model", "a", "--judge-model", "b", "--max-concurrency", "3",
            "--judge-timeout-s", "9.5", "--max-retries", "0", "--no-cache", "--out", "rows.json"]  # fmt: skip
    parsed = build_config(CalibrateCommand, command.make_context("calibrate", argv).params, CALIBRATE_OPTIONS)
    assert parsed.groups_file == Path("g.jsonl") and parsed.judge_model == ["a", "b"]
    assert parsed.out == Path("rows.json") and parsed.rubric == []
    ruler = parsed.ruler
    assert (ruler.max_concurrency, ruler.judge_timeout_s, ruler.max_retries, ruler.cache) == (3, 9.5, 0, False)
