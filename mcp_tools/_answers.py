"""Reading a scenario generator's answer: the JSON items (complete ones of a cut answer too) and their checks.

:func:`parse_items` finds the items, :func:`check_item` decides which become scenarios.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from mcp_tools._scenarios import Scenario, normalize_task

logger = logging.getLogger("mcp_tools._generate")  # one logger for the whole generator

__all__ = ["MIN_TASK_WORDS", "check_item", "complete_items", "name_words", "named_tool", "parse_items"]

#: Words (of two letters or more, apart from spaces) a task needs: "2.2.0.1" or
#: "delete_note_by_id" is not a request.
MIN_TASK_WORDS = 3
_WORD = re.compile(r"[^\W\d_]{2,}")
#: A list marker the generator may put before a task ("3. ", "- "); removed before checking.
_LIST_MARKER = re.compile(r"^\s*(?:\d{1,3}[.)]|[-*\u2022])\s+")
#: The words of an identifier or a text: letter runs split at camelCase humps, and digit runs.
_NAME_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def complete_items(text: str) -> list[Any]:
    """The complete objects of a ``"scenarios": [...`` array cut short (e.g. by a token limit)."""
    match = re.search(r'"scenarios"\s*:\s*\[', text)
    if match is None:
        return []
    decoder = json.JSONDecoder()
    items: list[Any] = []
    position = match.end()
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] != "{":
            return items
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return items
        items.append(item)


def parse_items(text: str) -> list[Any]:
    """The list of candidate items in an answer; raises ValueError when there is none."""
    stripped = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", stripped, re.DOTALL)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError:
        start = min((i for i in (stripped.find("{"), stripped.find("[")) if i >= 0), default=-1)
        if start < 0:
            raise ValueError(f"no JSON in the answer: {text[:120]!r}") from None
        try:
            data, _ = json.JSONDecoder().raw_decode(stripped[start:])
        except json.JSONDecodeError as exc:
            salvaged = complete_items(stripped)
            if not salvaged:
                raise ValueError(f"malformed JSON ({exc.msg}): {text[:120]!r}") from None
            logger.info("scenario generator: answer cut short; kept its %d complete item(s)", len(salvaged))
            data = salvaged
    if isinstance(data, dict):
        data = data.get("scenarios")
    if not isinstance(data, list):
        raise ValueError(f'expected {{"scenarios": [...]}}, got {text[:120]!r}')  # noqa: TRY004 - bad content
    return data


def name_words(text: str) -> list[str]:
    """The lower-case words of an identifier or a text, split the same way for both.

    ``read_file``, ``read-file``, ``readFile``, ``files.read`` and "read file" give
    ``["read", "file"]`` (resp. ``["files", "read"]``): letter runs split at anything else
    and at camelCase humps (``HTTPServer`` -> ``http``, ``server``), digit runs apart.
    """
    return [word.casefold() for word in _NAME_WORD.findall(text)]


def _contains(words: Sequence[str], part: Sequence[str]) -> bool:
    size = len(part)
    return any(list(words[i : i + size]) == list(part) for i in range(len(words) - size + 1))


#: Words next to a tool name's words written apart that make them the tool's name, not a request:
#: "use list notes", "call the read file tool". Without them "List notes tagged work" is plain English.
_CUES_BEFORE = frozenset({"use", "using", "call", "calling", "run", "running", "invoke", "execute", "via"})
_CUES_AFTER = frozenset({"tool", "tools", "function", "functions", "command", "api", "endpoint", "method"})


def _cued(words: Sequence[str], part: Sequence[str]) -> bool:
    """Whether *part* occurs in *words* right after a cue ("use", "call the") or right before one ("tool")."""
    size = len(part)
    for i in range(len(words) - size + 1):
        if list(words[i : i + size]) != list(part):
            continue
        before = words[max(0, i - 2) : i]
        if before and (before[-1] in _CUES_BEFORE or (before[-1] == "the" and before[0] in _CUES_BEFORE)):
            return True
        if words[i + size : i + size + 1] and words[i + size] in _CUES_AFTER:
            return True
    return False


def named_tool(task: str, tool_names: Sequence[str]) -> str | None:
    """The tool a task names outright, as an identifier; ``None`` when it names none.

    A name counts as named when the task writes it as a call (``name(``) or in backticks,
    or, for a name of two or more words, as one token in any naming style (:func:`name_words`
    splits both the same way): ``list_directory`` is named by "list_directory",
    "list-directory" or "listDirectory", ``readFile`` by "read_file". The same words written
    apart are ordinary English ("List notes tagged work" for ``list_notes``) unless the task
    calls them a tool: after "use", "call", "run", "invoke", "via" (and "the") or before
    "tool", "function", "command", "api", "endpoint", "method" ("Use search notes to ...").
    A one-word name (``add``, ``search``) is an ordinary word and counts only as a call or
    in backticks.
    """
    lowered = task.casefold()
    tokens = [name_words(token) for token in task.split()]
    task_words = [word for token in tokens for word in token]
    for name in tool_names:
        key = re.escape(name.casefold())
        if re.search(rf"(?<!\w){key}\s*\(|`{key}`", lowered):
            return name
        words = name_words(name)
        if len(words) >= 2 and (any(_contains(token, words) for token in tokens) or _cued(task_words, words)):
            return name
    return None


def _plain_words(task: str) -> int:
    """Words of 2+ letters between spaces; an identifier such as ``delete_note_by_id`` is none."""
    return sum(1 for token in task.split() if "_" not in token and _WORD.search(token))


def check_item(
    item: Any, tool_names: Sequence[str], seen: set[str], max_task_chars: int, task_pattern: str | None
) -> tuple[str, Scenario | None]:
    """``("", scenario)`` for a valid, new item; ``(reason, None)`` otherwise.

    An item becomes a :class:`~mcp_tools.Scenario` when it is an object with a ``task`` of
    3+ plain words (a leading list marker such as ``3.`` is dropped) and a ``difficulty`` 1-5,
    matches ``task_pattern`` if one is given, names no tool as an identifier (:func:`named_tool`:
    ``list_notes`` or "use list notes", not "List notes tagged work") and is not a duplicate
    (after :func:`~mcp_tools.normalize_task`).
    """
    if not isinstance(item, dict):
        return "malformed item", None
    task, difficulty = item.get("task"), item.get("difficulty")
    if not isinstance(task, str):
        return "malformed item", None
    task = _LIST_MARKER.sub("", task, count=1)
    if len(task.strip()) > max_task_chars:
        return "task too long", None
    if isinstance(difficulty, bool) or not isinstance(difficulty, int | str):
        return "bad difficulty", None
    try:
        scenario = Scenario(task=task, difficulty=difficulty)  # type: ignore[arg-type] - "3" is coerced
    except ValidationError as exc:
        fields = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        return ("bad difficulty" if "difficulty" in fields else "bad task"), None
    if _plain_words(scenario.task) < MIN_TASK_WORDS:
        return "not a sentence", None
    if task_pattern is not None and re.fullmatch(task_pattern, scenario.task) is None:
        return "does not match task_pattern", None
    if named_tool(scenario.task, tool_names) is not None:
        return "names a tool", None
    if normalize_task(scenario.task) in seen:
        return "duplicate", None
    return "", scenario
