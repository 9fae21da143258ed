"""Scenario records: the editable JSONL file (round trip, hand edits, errors naming file:line) and the split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mcp_tools
from art_adapters._errors import ConfigError
from mcp_tools import Scenario, ScenarioFileError, load_scenarios, save_scenarios, split_scenarios


def _scenarios(count: int) -> list[Scenario]:
    return [
        Scenario(task=f"Find the note about topic number {i}", difficulty=1 + i % 5) for i in range(count)
    ]


def test_the_package_exports_the_scenario_api() -> None:
    for name in ("Scenario", "generate_scenarios", "load_scenarios", "save_scenarios", "split_scenarios"):
        assert name in mcp_tools.__all__
    assert all(getattr(mcp_tools, name) is not None for name in mcp_tools.__all__)


def test_save_then_load_round_trips_and_ids_are_stable(tmp_path: Path) -> None:
    scenarios = [*_scenarios(3), Scenario(task="Plan my week  ", difficulty=2, metadata={"source": "hand"})]
    path = save_scenarios(scenarios, tmp_path / "sub" / "s.jsonl")
    assert load_scenarios(path) == scenarios
    assert scenarios[-1].task == "Plan my week"
    # the id derives from the normalised task: same words, same id, in any run
    assert Scenario(task="plan my WEEK!", difficulty=5).id == scenarios[-1].id
    assert [p.name for p in path.parent.iterdir()] == ["s.jsonl"]  # no temporary file left


def test_hand_edited_lines_need_only_task_and_difficulty(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"task": "What is on my grocery list?", "difficulty": 1}\n\n'
        '{"id": "mine", "task": "Move the Lisbon hotel note to work", "difficulty": 4}\n',
        encoding="utf-8",
    )
    first, second = load_scenarios(path)
    assert first.id.startswith("scn-") and first.difficulty == 1
    assert second.id == "mine"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"task": "A fine task here", "difficulty": 2}', "{not json"], ":2: not valid JSON"),
        (['["a", 1]'], ":1: expected a JSON object"),
        (['{"task": "A fine task here"}'], ":1: difficulty: Field required"),
        (
            ['{"task": "A fine task here", "difficulty": 9}'],
            ":1: difficulty: Input should be less than or equal to 5",
        ),
        (['{"task": "short", "difficulty": 2}'], ":1: task: String should have at least 8 characters"),
        (['{"task": "A fine task here", "difficulty": 2, "dificulty": 3}'], ":1: dificulty: Extra inputs"),
        (
            [
                '{"id": "x", "task": "A fine task here", "difficulty": 2}',
                '{"id": "x", "task": "Another task here", "difficulty": 2}',
            ],
            ":2: id 'x' is already used on line 1",
        ),
        (
            [
                '{"task": "A fine task here", "difficulty": 2}',
                '{"task": "a FINE task, here.", "difficulty": 3}',
            ],
            ":2: the same task as line 1",
        ),
        (["", "  "], "holds no scenarios"),
    ],
)
def test_bad_lines_are_clear_errors_naming_file_and_line(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ScenarioFileError) as info:
        load_scenarios(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)
    assert isinstance(info.value, ConfigError)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioFileError, match="no such scenarios file"):
        load_scenarios(tmp_path / "nope.jsonl")


def test_split_is_seeded_disjoint_and_sized() -> None:
    scenarios = _scenarios(10)
    train, val = split_scenarios(scenarios, val_fraction=0.2, seed=7)
    assert (len(train), len(val)) == (8, 2)
    assert {s.id for s in train} | {s.id for s in val} == {s.id for s in scenarios}
    assert not {s.id for s in train} & {s.id for s in val}
    assert split_scenarios(scenarios, val_fraction=0.2, seed=7) == (train, val)
    other = {split_scenarios(scenarios, val_fraction=0.2, seed=s)[1][0].id for s in range(6)}
    assert len(other) > 1  # the seed matters
    assert [s.id for s in train] == [s.id for s in scenarios if s in train]  # original order kept
    assert len(split_scenarios(scenarios, val_size=3)[1]) == 3
    assert split_scenarios(scenarios, val_fraction=0.0) == (scenarios, [])
    assert len(split_scenarios(scenarios[:2], val_fraction=0.01)[1]) == 1  # at least one each side


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"val_fraction": 1.0}, "val_fraction must be in"),
        ({"val_size": 3}, "at least one must stay for training"),
        ({"val_size": -1}, "val_size must be an int"),
    ],
)
def test_split_rejects_impossible_sizes(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        split_scenarios(_scenarios(3), **kwargs)


def test_saved_lines_are_plain_json_objects(tmp_path: Path) -> None:
    path = save_scenarios(_scenarios(2), tmp_path / "s.jsonl")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [set(r) for r in rows] == [{"id", "task", "difficulty", "metadata"}] * 2
