"""The scenario writer's prompt: the tools as it reads them, the answer's schema, one call's request.

The request is fitted to the writer's context (:mod:`mcp_tools._budget`): the tools, the
guidance and the request always go in; the tasks already written and the resources share what
is left.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from art_adapters import ConfigError
from mcp_tools._budget import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    UNKNOWN_CONTEXT_RESOURCE_CHARS,
    answer_reserve,
    describe_resources,
    estimate_tokens,
)
from mcp_tools._scenarios import MAX_TASK_CHARS, MIN_TASK_CHARS, Scenario

__all__ = [
    "PLAIN_TASK_PATTERN",
    "SYSTEM_PROMPT",
    "Prompt",
    "PromptTooLong",
    "answer_schema",
    "describe_tools",
    "difficulty_plan",
    "request_text",
    "tool_spec",
    "type_name",
]

#: A ``task_pattern`` for small generators: one line of 3-30 plain words starting with a capital.
#: Under schema-constrained decoding it keeps a 135M model on words instead of digits and
#: punctuation; strong models do not need it (it forbids quotes, colons, slashes, newlines).
PLAIN_TASK_PATTERN = r"^[A-Z][a-z]*( [A-Za-z0-9+?.,'#-]+){2,29}$"
_AVOID_SHOWN = 40
_REJECTED_SHOWN = 5

SYSTEM_PROMPT = """\
You write realistic tasks for training and testing an AI assistant. The assistant can \
use the tools listed below; the user cannot see them. Each task is one message a real \
user would send: specific (concrete names, numbers, dates, topics), self-contained, \
and solvable with these tools. Never name a tool or mention tools, functions or APIs: \
describe what the user wants, not how to get it. Rate each task's difficulty from 1 \
(one simple tool call) to 5 (many steps, combining several results). Vary the topics, \
the wording and the difficulty."""



def tool_spec(tool: Any) -> dict[str, Any]:
    if isinstance(tool, Mapping):
        if "function" in tool:  # OpenAI tool format
            function = tool["function"]
            return {
                "name": function["name"],
                "description": function.get("description", ""),
                "parameters": function.get("parameters") or {},
            }
        if "name" not in tool:
            raise ConfigError(
                f"a tool dict needs a 'name' (MCP wire form or OpenAI format), got {sorted(tool)}"
            )
        return {
            "name": tool["name"],
            "description": tool.get("description") or tool.get("title") or "",
            "parameters": tool.get("inputSchema") or tool.get("parameters") or {},
        }
    name = getattr(tool, "name", None)
    if not isinstance(name, str):
        raise ConfigError(
            f"cannot read a tool from {type(tool).__name__}: pass LangChain tools or MCP tool dicts"
        )
    schema = getattr(tool, "args_schema", None)
    if isinstance(schema, dict):
        parameters = schema
    elif schema is not None and hasattr(schema, "model_json_schema"):
        parameters = schema.model_json_schema()
    else:
        parameters = {"type": "object", "properties": dict(getattr(tool, "args", {}) or {})}
    return {"name": name, "description": getattr(tool, "description", "") or "", "parameters": parameters}


def type_name(schema: Mapping[str, Any]) -> str:
    if "type" in schema:
        kind = schema["type"]
        if kind == "array" and isinstance(schema.get("items"), Mapping):
            return f"list of {type_name(schema['items'])}"
        return kind if isinstance(kind, str) else " or ".join(k for k in kind if k != "null")
    options = [o for o in schema.get("anyOf") or schema.get("oneOf") or [] if o.get("type") != "null"]
    return " or ".join(type_name(o) for o in options) or "any"


def describe_tools(tools: Sequence[Any], resources: Sequence[Mapping[str, Any]] = ()) -> str:
    """The tools (name, description, arguments) and resources as the generator reads them."""
    lines = ["Tools:"]
    for spec in (tool_spec(t) for t in tools):
        props = (spec["parameters"] or {}).get("properties") or {}
        required = set((spec["parameters"] or {}).get("required") or [])
        args = ", ".join(
            f"{arg}: {type_name(info or {})}{'' if arg in required else ' (optional)'}"
            for arg, info in props.items()
        )
        description = " ".join(str(spec["description"]).split())
        lines.append(f"- {spec['name']}({args}): {description}")
    shown, _ = describe_resources(resources, None)
    if shown:
        lines += ["", shown]
    return "\n".join(lines)


def answer_schema(
    count: int, max_task_chars: int = MAX_TASK_CHARS, task_pattern: str | None = None
) -> dict[str, Any]:
    """The JSON schema of one answer: ``{"scenarios": [{"task", "difficulty"}] * count}``."""
    task: dict[str, Any] = {"type": "string", "minLength": MIN_TASK_CHARS, "maxLength": max_task_chars}
    if task_pattern is not None:
        task["pattern"] = task_pattern
    return {
        "type": "object",
        "properties": {
            "scenarios": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "task": task,
                        "difficulty": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
                    },
                    "required": ["task", "difficulty"],
                    "additionalProperties": False,
                },
                "minItems": count,
                "maxItems": count,
            }
        },
        "required": ["scenarios"],
        "additionalProperties": False,
    }


def difficulty_plan(written: Sequence[int], count: int) -> list[int]:
    """Difficulties to ask for next so that all five levels stay about equally common."""
    counts = Counter({level: 0 for level in range(1, 6)})
    counts.update(d for d in written if 1 <= d <= 5)
    plan: list[int] = []
    for _ in range(count):
        level = min(range(1, 6), key=lambda d: (counts[d], d))
        counts[level] += 1
        plan.append(level)
    return sorted(plan)


class PromptTooLong(Exception):
    """The tools, guidance and request alone need more characters than the prompt may have."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


def request_text(
    tools_text: str,
    resources: Sequence[Mapping[str, Any]],
    count: int,
    written: Sequence[Scenario],
    instructions: str | None,
    room: int | None,
    rejected: Sequence[tuple[str, str]] = (),
) -> tuple[str, int]:
    """The user message of one call in at most *room* characters (``None``: no overall limit).

    The tools, the guidance and the request always go in (:class:`PromptTooLong` when they
    alone do not fit); the newest tasks already written take at most half of what is left,
    the resources the rest (:func:`~mcp_tools._budget.describe_resources`). The last few
    *rejected* ``(task, reason)`` pairs are shown first, so a retry differs from the call it
    repeats (a seeded sampler would otherwise write the same answer again). Returns the text
    and how many resources were cut or left out.
    """
    guidance = [f"Guidance: {instructions.strip()}", ""] if instructions else []
    plan = ", ".join(str(d) for d in difficulty_plan([s.difficulty for s in written], count))
    request = (
        f"Write {count} new task{'s' if count != 1 else ''} (difficulties: {plan}). Answer with JSON only: "
        '{"scenarios": [{"task": "...", "difficulty": 1}]}'
    )
    needed = len("\n".join([tools_text, "", *guidance, request]))
    left = None if room is None else room - needed
    if left is not None and left < 0:
        raise PromptTooLong(needed)
    avoid_room = None if left is None else left // 2
    shown: list[str] = []
    used = 0
    for scenario in reversed(list(written)[-_AVOID_SHOWN:]):
        line = f"- {scenario.task}"
        if avoid_room is not None and used + len(line) + 1 > avoid_room:
            break
        shown.append(line)
        used += len(line) + 1
    avoid = ["Tasks already written (write different ones):", *reversed(shown), ""] if shown else []
    bad = [f"- {task} ({reason})" for task, reason in list(rejected)[-_REJECTED_SHOWN:]]
    bad_chars = len("\n".join(bad)) + 80
    if bad and (avoid_room is None or used + bad_chars <= left):
        avoid += ["Rejected tasks (do not write tasks like these):", *bad, ""]
        used += bad_chars
    resource_room = UNKNOWN_CONTEXT_RESOURCE_CHARS if left is None else left - used - 64
    resource_text, trimmed = describe_resources(resources, resource_room)
    parts = [tools_text, *(["", resource_text] if resource_text else []), "", *guidance, *avoid, request]
    return "\n".join(parts), trimmed


@dataclass(frozen=True)
class Prompt:
    """What every call of one run tells the writer: the tools, resources and guidance, fitted to its context.

    Attributes:
        tools_text: :func:`describe_tools` of the tools.
        tool_count: how many tools (for the error when they alone do not fit).
        resources: the server's resources (trimmed per call to the room left).
        instructions: the caller's extra guidance, or ``None``.
        context_tokens: the writer's context length (``None``: unknown, resources cut to a fixed size).
        max_task_chars: longest task accepted (the answer's reserve and schema use it).
        task_pattern: the pattern every task must match, sent in the schema.
    """

    tools_text: str
    tool_count: int
    resources: Sequence[Mapping[str, Any]]
    instructions: str | None
    context_tokens: int | None
    max_task_chars: int
    task_pattern: str | None

    def request(
        self, generator: Any, count: int, written: Sequence[Scenario], rejected: Sequence[tuple[str, str]]
    ) -> tuple[list[BaseMessage], int]:
        """The messages asking for *count* tasks, and how many resources were cut to fit.

        Raises:
            ConfigError: the tool descriptions alone do not fit the writer's context.
        """
        room = reserve = None
        if self.context_tokens is not None:
            reserve = answer_reserve(generator, count, self.max_task_chars) + 2 * MESSAGE_OVERHEAD_TOKENS
            room = (self.context_tokens - reserve) * CHARS_PER_TOKEN - len(SYSTEM_PROMPT)
        try:
            text, trimmed = request_text(
                self.tools_text, self.resources, count, written, self.instructions, room, rejected
            )
        except PromptTooLong as exc:
            needed = estimate_tokens(SYSTEM_PROMPT) + exc.needed // CHARS_PER_TOKEN
            raise ConfigError(
                f"the {self.tool_count} tool descriptions alone need about {needed} tokens (estimated as "
                f"characters / {CHARS_PER_TOKEN}) but the generator's context holds {self.context_tokens}, "
                f"{reserve} of them kept for its answer: pass fewer tools (one server at a time), a "
                "generator with a longer context, or the right context_tokens= if that number is wrong"
            ) from None
        return [SystemMessage(SYSTEM_PROMPT), HumanMessage(text)], trimmed

    def schema(self, count: int) -> dict[str, Any]:
        """The JSON schema of an answer with *count* tasks."""
        return answer_schema(count, self.max_task_chars, self.task_pattern)
