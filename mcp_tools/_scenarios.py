"""Scenarios for MCP-RL: the record, the JSONL file you can edit, and the train/validation split.

A scenario is one task a user might give the agent. :func:`mcp_tools.generate_scenarios` writes them;
this module keeps them in a JSONL file a person can read and edit between generating and training.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from art_adapters import ConfigError
from art_adapters.files import append_durably, write_atomic

__all__ = [
    "Scenario",
    "ScenarioFileError",
    "append_scenarios",
    "load_scenarios",
    "normalize_task",
    "save_scenarios",
    "split_scenarios",
]

#: Longest task text accepted (characters). Longer "tasks" are rambling, not requests.
MAX_TASK_CHARS = 600
#: Shortest task text accepted (characters).
MIN_TASK_CHARS = 8


class ScenarioFileError(ConfigError):
    """A scenarios file is missing or holds an invalid line; the message names ``file:line``."""


def normalize_task(text: str) -> str:
    """The form used to find duplicates: Unicode-folded, lower case, punctuation dropped, spaces collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words = re.sub(r"[^\w\s]", " ", folded)
    return " ".join(words.split())


def _default_id(task: str) -> str:
    return "scn-" + hashlib.sha256(normalize_task(task).encode()).hexdigest()[:12]


class Scenario(BaseModel):
    """One task for the agent.

    Kept in a JSONL file::

        mcp_tools.save_scenarios(scenarios, "scenarios.jsonl")   # one JSON object a line
        append_scenarios([scenario], "scenarios.jsonl")          # one more line, on disk (fsynced)
        scenarios = mcp_tools.load_scenarios("scenarios.jsonl")  # after editing by hand
        train, val = mcp_tools.split_scenarios(scenarios, val_fraction=0.2, seed=0)

    Attributes:
        id: stable identifier (default: ``scn-`` and a hash of the normalised task), used
            as the group's scenario id, in caches and in the split.
        task: what the user asks, in their words; it should need the server's tools
            without naming them.
        difficulty: 1 (a single simple tool call) to 5 (many steps, combining results).
        metadata: anything else you want to keep with it (source, expected answer, notes).
    """

    model_config = ConfigDict(extra="forbid")

    id: str = ""
    task: str = Field(min_length=MIN_TASK_CHARS, max_length=MAX_TASK_CHARS)
    difficulty: int = Field(ge=1, le=5)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fill_id(self) -> Scenario:
        self.task = self.task.strip()
        if len(self.task) < MIN_TASK_CHARS:
            raise ValueError(f"task must have at least {MIN_TASK_CHARS} characters besides spaces")
        if not self.id:
            self.id = _default_id(self.task)
        return self

    def messages(self) -> list[dict[str, str]]:
        """The task as the first user message of a rollout."""
        return [{"role": "user", "content": self.task}]


def save_scenarios(scenarios: Iterable[Scenario], path: str | Path) -> Path:
    """Write *scenarios* to *path* as JSONL (one object a line, UTF-8); returns the path.

    The parent folder is created. The file is written whole (fsynced), then renamed into place.
    """
    lines = [
        json.dumps(s.model_dump(mode="json", exclude_defaults=False), ensure_ascii=False) for s in scenarios
    ]
    return write_atomic(path, "".join(line + "\n" for line in lines).encode("utf-8"))


def append_scenarios(scenarios: Iterable[Scenario], path: str | Path) -> Path:
    """Append *scenarios* to the JSONL file *path* (created with its folder if missing); returns the path.

    Each call appends its lines with :func:`art_adapters.files.append_durably` (``O_APPEND``,
    fsynced; a torn last line left by a crash is cut off first), so scenarios accepted one by
    one survive a crash or a kill right after.
    """
    path = Path(path)
    data = "".join(
        json.dumps(s.model_dump(mode="json", exclude_defaults=False), ensure_ascii=False) + "\n" for s in scenarios
    ).encode()
    if not data:
        return path
    append_durably(path, data)
    return path


def _line_error(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "line"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def load_scenarios(path: str | Path) -> list[Scenario]:
    """Read scenarios written by :func:`save_scenarios` (or by hand).

    A hand-written line needs only ``task`` and ``difficulty``; a missing ``id`` is derived
    from the task text. Blank lines are skipped. Any mistake names ``file:line``.

    Raises:
        ScenarioFileError: the file is missing or empty, a line is not a JSON object, a
            field is missing or invalid, or two lines share an id or the same task.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioFileError(f"{path}: no such scenarios file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioFileError(f"{path}: cannot read the scenarios file: {exc}") from exc
    scenarios: list[Scenario] = []
    ids: dict[str, int] = {}
    tasks: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioFileError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise ScenarioFileError(
                f'{where}: expected a JSON object like {{"task": "...", "difficulty": 3}}, '
                f"got {type(data).__name__}"
            )
        try:
            scenario = Scenario.model_validate(data)
        except ValidationError as exc:
            raise ScenarioFileError(f"{where}: {_line_error(exc)}") from None
        key = normalize_task(scenario.task)
        if key in tasks:
            raise ScenarioFileError(f"{where}: the same task as line {tasks[key]}; remove one of them")
        if scenario.id in ids:
            raise ScenarioFileError(f"{where}: id {scenario.id!r} is already used on line {ids[scenario.id]}")
        ids[scenario.id] = number
        tasks[key] = number
        scenarios.append(scenario)
    if not scenarios:
        raise ScenarioFileError(f"{path}: the file holds no scenarios")
    return scenarios


def split_scenarios(
    scenarios: Sequence[Scenario], *, val_fraction: float = 0.2, val_size: int | None = None, seed: int = 0
) -> tuple[list[Scenario], list[Scenario]]:
    """Split into (train, validation), shuffled with *seed*: the same input and seed, the same split.

    Args:
        scenarios: the scenarios (at least 2 when a validation set is asked for).
        val_fraction: share of scenarios for validation, in [0, 1); rounded, but at least
            one scenario on each side when it is > 0. Ignored when *val_size* is given.
        val_size: exact number of validation scenarios (0 .. len - 1).
        seed: the shuffle's seed.

    Raises:
        ConfigError: a fraction or size that leaves either side empty or is out of range.
    """
    items = list(scenarios)
    total = len(items)
    if val_size is None:
        if not 0 <= val_fraction < 1:
            raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
        size = 0 if val_fraction == 0 else min(max(1, round(total * val_fraction)), total - 1)
    else:
        if isinstance(val_size, bool) or not isinstance(val_size, int) or val_size < 0:
            raise ConfigError(f"val_size must be an int >= 0, got {val_size!r}")
        size = val_size
    if size and size >= total:
        raise ConfigError(
            f"cannot hold out {size} validation scenario(s) from {total}: at least one must stay for "
            "training; generate more scenarios or lower val_fraction / val_size"
        )
    order = list(range(total))
    random.Random(seed).shuffle(order)
    val_idx = set(order[:size])
    train = [s for i, s in enumerate(items) if i not in val_idx]
    val = [s for i, s in enumerate(items) if i in val_idx]
    return train, val
