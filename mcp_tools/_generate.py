"""``generate_scenarios``: a chat model writes tasks that need an MCP server's tools.

The generator model reads every tool's name, description and argument schema (and the
server's resources, when it has any) and answers JSON constrained by a schema
(``with_structured_output(method="json_schema")``, i.e. ``response_format`` json_schema,
where the model supports it; plain JSON in the prompt otherwise). Each answer is checked
item by item: malformed items, tasks that name a tool, and duplicates of earlier tasks
(compared after :func:`~mcp_tools.normalize_task`) are dropped, and the model is asked
again for the missing ones, told which tasks it already wrote. The result is exactly
``n`` scenarios, or a :class:`ScenarioGenerationError` saying what went wrong.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from art_adapters.content import content_text
from art_adapters.errors import ArtAdaptersError, ConfigError
from art_adapters.structured_output import (
    NO_JSON_SCHEMA_MODE,
    answer_text,
    json_schema_output,
    rejects_json_schema,
)
from mcp_tools._scenarios import MAX_TASK_CHARS, MIN_TASK_CHARS, Scenario, normalize_task

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

logger = logging.getLogger(__name__)

__all__ = [
    "PLAIN_TASK_PATTERN",
    "ScenarioGenerationError",
    "default_generator",
    "describe_tools",
    "generate_scenarios",
]

#: Environment variables naming the configured judge (also the default scenario generator).
JUDGE_MODEL_ENV = "ART_ADAPTERS_JUDGE_MODEL"
JUDGE_BASE_URL_ENV = "ART_ADAPTERS_JUDGE_BASE_URL"
JUDGE_API_KEY_ENV = "ART_ADAPTERS_JUDGE_API_KEY"

_SCHEMA_NAME = "scenarios"
#: Words (of two letters or more) a task needs: "2.2.0.1" or "baedaaaahh" is not a request.
MIN_TASK_WORDS = 3
_WORD = re.compile(r"[^\W\d_]{2,}")

#: A ``task_pattern`` for small generators: one line of 3-30 plain words starting with a capital.
#: Under schema-constrained decoding it keeps a 135M model on words instead of digits and
#: punctuation; strong models do not need it (it forbids quotes, colons, slashes, newlines).
PLAIN_TASK_PATTERN = r"^[A-Z][a-z]*( [A-Za-z0-9+?.,'#-]+){2,29}$"
_AVOID_SHOWN = 40
_RESOURCE_TEXT_CHARS = 2000

SYSTEM_PROMPT = """\
You write realistic tasks for training and testing an AI assistant. The assistant can \
use the tools listed below; the user cannot see them. Each task is one message a real \
user would send: specific (concrete names, numbers, dates, topics), self-contained, \
and solvable with these tools. Never name a tool or mention tools, functions or APIs: \
describe what the user wants, not how to get it. Rate each task's difficulty from 1 \
(one simple tool call) to 5 (many steps, combining several results). Vary the topics, \
the wording and the difficulty."""


class ScenarioGenerationError(ArtAdaptersError):
    """The generator did not produce enough valid, distinct scenarios after its retries."""


def default_generator() -> BaseChatModel:
    """The configured judge as a chat model: ``$ART_ADAPTERS_JUDGE_MODEL`` on ``$ART_ADAPTERS_JUDGE_BASE_URL``.

    ``$ART_ADAPTERS_JUDGE_API_KEY`` (or ``$OPENAI_API_KEY``) is the key; without a base
    URL the OpenAI API is used.

    Raises:
        ConfigError: ``$ART_ADAPTERS_JUDGE_MODEL`` is not set.
    """
    model = os.environ.get(JUDGE_MODEL_ENV, "").strip()
    if not model:
        raise ConfigError(
            f"no generator model: pass model= (any LangChain chat model, e.g. ChatOpenAI(...) or "
            f"model.chat_model()) or set ${JUDGE_MODEL_ENV} (and ${JUDGE_BASE_URL_ENV}, "
            f"${JUDGE_API_KEY_ENV}) to configure the judge"
        )
    from langchain_openai import ChatOpenAI

    base_url = os.environ.get(JUDGE_BASE_URL_ENV) or None
    api_key = os.environ.get(JUDGE_API_KEY_ENV) or os.environ.get("OPENAI_API_KEY") or "not-needed"
    return ChatOpenAI(model=model, base_url=base_url, api_key=api_key, temperature=1.0)


def _tool_spec(tool: Any) -> dict[str, Any]:
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


def _type_name(schema: Mapping[str, Any]) -> str:
    if "type" in schema:
        kind = schema["type"]
        if kind == "array" and isinstance(schema.get("items"), Mapping):
            return f"list of {_type_name(schema['items'])}"
        return kind if isinstance(kind, str) else " or ".join(k for k in kind if k != "null")
    options = [o for o in schema.get("anyOf") or schema.get("oneOf") or [] if o.get("type") != "null"]
    return " or ".join(_type_name(o) for o in options) or "any"


def describe_tools(tools: Sequence[Any], resources: Sequence[Mapping[str, Any]] = ()) -> str:
    """The tools (name, description, arguments) and resources as the generator reads them."""
    lines = ["Tools:"]
    for spec in (_tool_spec(t) for t in tools):
        props = (spec["parameters"] or {}).get("properties") or {}
        required = set((spec["parameters"] or {}).get("required") or [])
        args = ", ".join(
            f"{arg}: {_type_name(info or {})}{'' if arg in required else ' (optional)'}"
            for arg, info in props.items()
        )
        description = " ".join(str(spec["description"]).split())
        lines.append(f"- {spec['name']}({args}): {description}")
    if resources:
        lines.append("")
        lines.append("Data the server holds (resources):")
        for resource in resources:
            head = f"- {resource.get('name') or resource.get('uri')}"
            if resource.get("description"):
                head += f": {' '.join(str(resource['description']).split())}"
            lines.append(head)
            text = resource.get("text")
            if text:
                lines.append(str(text)[:_RESOURCE_TEXT_CHARS])
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


def _request_text(description: str, count: int, written: Sequence[Scenario], instructions: str | None) -> str:
    avoid = [s.task for s in written]
    parts = [description, ""]
    if instructions:
        parts += [f"Guidance: {instructions.strip()}", ""]
    if avoid:
        shown = list(avoid)[-_AVOID_SHOWN:]
        parts.append("Tasks already written (write different ones):")
        parts += [f"- {t}" for t in shown]
        parts.append("")
    plan = ", ".join(str(d) for d in difficulty_plan([s.difficulty for s in written], count))
    parts.append(
        f"Write {count} new task{'s' if count != 1 else ''} (difficulties: {plan}). Answer with JSON only: "
        '{"scenarios": [{"task": "...", "difficulty": 1}]}'
    )
    return "\n".join(parts)


async def _ask(model: Any, messages: list[Any], schema: dict[str, Any], structured: bool) -> str:
    if structured:
        try:
            runnable = json_schema_output(model, _SCHEMA_NAME, schema)
        except NO_JSON_SCHEMA_MODE as exc:
            logger.debug("generator %s: no json_schema structured output (%s); asking plainly", model, exc)
        else:
            try:
                return answer_text(await runnable.ainvoke(messages))
            except Exception as exc:
                if not rejects_json_schema(exc):
                    raise
                logger.warning("generator rejected the json_schema response format (%s); asking plainly", exc)
    reply = await model.ainvoke(messages)
    return content_text(reply.content)


def _complete_items(text: str) -> list[Any]:
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


def _parse_items(text: str) -> list[Any]:
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
            salvaged = _complete_items(stripped)
            if not salvaged:
                raise ValueError(f"malformed JSON ({exc.msg}): {text[:120]!r}") from None
            logger.info("scenario generator: answer cut short; kept its %d complete item(s)", len(salvaged))
            data = salvaged
    if isinstance(data, dict):
        data = data.get("scenarios")
    if not isinstance(data, list):
        raise ValueError(f'expected {{"scenarios": [...]}}, got {text[:120]!r}')  # noqa: TRY004 - bad content
    return data


def _named_tool(task: str, tool_names: Sequence[str]) -> str | None:
    """The tool a task names outright: written as a call, in backticks, or an identifier-like name."""
    lowered = task.casefold()
    for name in tool_names:
        key = re.escape(name.casefold())
        if re.search(rf"(?<!\w){key}\s*\(|`{key}`", lowered):
            return name
        if re.search(r"[_\d]|[a-z][A-Z]", name) and re.search(rf"(?<!\w){key}(?!\w)", lowered):
            return name
    return None


def _is_server(tools: Any) -> bool:
    if isinstance(tools, str | Mapping):
        return not (isinstance(tools, Mapping) and "name" in tools)
    if isinstance(tools, list | tuple):
        return bool(tools) and all(isinstance(t, str) for t in tools)
    return hasattr(tools, "command") or hasattr(tools, "url")


async def _server_listing(server: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from mcp_tools._session import McpSession

    async with McpSession(server) as session:
        listing = await session.list_tools()
        resources = await session.read_resources()
    tools = [t for server_tools in listing.values() for t in server_tools]
    return tools, resources


async def generate_scenarios(
    tools: Any,
    *,
    n: int = 20,
    model: BaseChatModel | None = None,
    resources: Sequence[Mapping[str, Any]] | None = None,
    instructions: str | None = None,
    batch_size: int = 10,
    max_retries: int = 3,
    structured: bool = True,
    timeout_s: float | None = 300.0,
    max_task_chars: int = MAX_TASK_CHARS,
    existing: Sequence[Scenario] = (),
    task_pattern: str | None = None,
) -> list[Scenario]:
    """Have *model* write *n* distinct, realistic tasks that need *tools* (without naming them).

    Args:
        tools: the server's tools: LangChain tools (from :func:`mcp_tools.load_tools`), MCP
            tool dicts, or OpenAI tool dicts; or a server itself (command, URL or config
            dict, as for ``load_tools``), whose tools and resources are then listed.
        n: how many scenarios, >= 1.
        model: the generator, any LangChain chat model (default: the configured judge, see
            :func:`default_generator`). A little temperature helps variety.
        resources: the server's resources (``uri``, ``name``, ``description``, and
            ``text`` when read), shown to the generator so tasks fit the server's data.
        instructions: extra guidance for the generator (domain, persona, style).
        batch_size: most scenarios asked for in one call.
        max_retries: further calls allowed after calls that failed or fell short
            (malformed answer, duplicates, tasks naming a tool, endpoint error, timeout).
        structured: ask for ``response_format`` json_schema where the model supports it
            (an endpoint that answers it with HTTP 400/422 is asked plainly instead).
        timeout_s: seconds one generator call may take; ``None``: no limit.
        max_task_chars: longest task accepted, in characters.
        existing: scenarios you already have (e.g. ``load_scenarios(file)``): the new ones
            differ from them, and the generator sees them; they are not returned.
        task_pattern: a regular expression every task must match, also sent in the schema
            (``pattern``) so constrained decoding enforces it; :data:`PLAIN_TASK_PATTERN`
            keeps small models on words. Default: none (any text of 3+ words).

    Returns:
        Exactly *n* :class:`~mcp_tools.Scenario` objects, in the order written.

    Raises:
        ConfigError: an argument is invalid, or no model is given or configured.
        ScenarioGenerationError: fewer than *n* valid distinct scenarios after the retries;
            the message counts what was rejected and why.
        ToolServerError: *tools* is a server that could not be reached.
    """
    for label, value, low in (("n", n, 1), ("batch_size", batch_size, 1), ("max_retries", max_retries, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{label} must be an int >= {low}, got {value!r}")
    if not MIN_TASK_CHARS < max_task_chars <= MAX_TASK_CHARS:
        raise ConfigError(
            f"max_task_chars must be in ({MIN_TASK_CHARS}, {MAX_TASK_CHARS}], got {max_task_chars!r}"
        )
    if _is_server(tools):
        tools, listed = await _server_listing(tools)
        resources = listed if resources is None else resources
    tools = list(tools)
    if not tools:
        raise ConfigError(
            "no tools to write scenarios for: the tool list (or the server's tool listing) is empty"
        )
    if task_pattern is not None:
        try:
            re.compile(task_pattern)
        except re.error as exc:
            raise ConfigError(f"task_pattern is not a valid regular expression: {exc}") from exc
    specs = [_tool_spec(t) for t in tools]
    tool_names = [s["name"] for s in specs]
    generator = model if model is not None else default_generator()
    if not hasattr(generator, "ainvoke"):
        raise ConfigError(f"model must be a LangChain chat model, got {type(generator).__name__}")
    description = describe_tools(specs, resources or ())

    from langchain_core.messages import HumanMessage, SystemMessage

    accepted: list[Scenario] = []
    existing = list(existing)
    seen: set[str] = {normalize_task(s.task) for s in existing}
    rejected: Counter[str] = Counter()
    examples: dict[str, str] = {}
    last_error: str | None = None
    calls_allowed = math.ceil(n / batch_size) + max_retries
    calls = 0
    while len(accepted) < n and calls < calls_allowed:
        calls += 1
        count = min(n - len(accepted), batch_size)
        messages = [
            SystemMessage(SYSTEM_PROMPT),
            HumanMessage(_request_text(description, count, [*existing, *accepted], instructions)),
        ]
        try:
            text = await asyncio.wait_for(
                _ask(generator, messages, answer_schema(count, max_task_chars, task_pattern), structured),
                timeout_s,
            )
            items = _parse_items(text)
        except TimeoutError:
            waited = f"within {timeout_s:g}s" if timeout_s is not None else "(the model timed out)"
            last_error = f"call {calls}: no answer {waited}"
            rejected["timeout"] += 1
            logger.warning("scenario generator: %s", last_error)
            continue
        except ValueError as exc:
            last_error = f"call {calls}: {exc}"
            rejected["malformed answer"] += 1
            logger.warning("scenario generator: %s", last_error)
            continue
        except Exception as exc:  # noqa: BLE001 - endpoint errors (openai.APIError...) share no base; retried
            last_error = f"call {calls}: {type(exc).__name__}: {exc}"
            rejected["endpoint error"] += 1
            logger.warning("scenario generator: %s", last_error)
            continue
        added = 0
        for item in items:
            reason, scenario = _check_item(item, tool_names, seen, max_task_chars, task_pattern)
            if scenario is None:
                rejected[reason] += 1
                examples.setdefault(reason, repr(item)[:100])
                continue
            if len(accepted) >= n:
                break
            seen.add(normalize_task(scenario.task))
            accepted.append(scenario)
            added += 1
        logger.info(
            "scenario generator call %d: %d of %d asked accepted (%d/%d)",
            calls,
            added,
            count,
            len(accepted),
            n,
        )
    if len(accepted) < n:
        why = ", ".join(f"{count} {reason}" for reason, count in rejected.most_common()) or "nothing rejected"
        detail = "; ".join(f"{reason}: {example}" for reason, example in examples.items())
        raise ScenarioGenerationError(
            f"the generator wrote {len(accepted)} of {n} valid distinct scenarios in {calls} call(s) "
            f"(rejected: {why}){'; e.g. ' + detail if detail else ''}"
            f"{'; last error: ' + last_error if last_error else ''}. Raise max_retries, use a stronger "
            "model, or write the missing scenarios by hand (save_scenarios / load_scenarios)."
        )
    return accepted


def _check_item(
    item: Any, tool_names: Sequence[str], seen: set[str], max_task_chars: int, task_pattern: str | None
) -> tuple[str, Scenario | None]:
    if not isinstance(item, dict):
        return "malformed item", None
    task, difficulty = item.get("task"), item.get("difficulty")
    if not isinstance(task, str):
        return "malformed item", None
    if len(task.strip()) > max_task_chars:
        return "task too long", None
    if isinstance(difficulty, bool) or not isinstance(difficulty, int | str):
        return "bad difficulty", None
    try:
        scenario = Scenario(task=task, difficulty=difficulty)  # type: ignore[arg-type] - "3" is coerced
    except ValidationError as exc:
        fields = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        return ("bad difficulty" if "difficulty" in fields else "bad task"), None
    if len(_WORD.findall(scenario.task)) < MIN_TASK_WORDS:
        return "not a sentence", None
    if task_pattern is not None and re.fullmatch(task_pattern, scenario.task) is None:
        return "does not match task_pattern", None
    named = _named_tool(scenario.task, tool_names)
    if named is not None:
        return "names a tool", None
    if normalize_task(scenario.task) in seen:
        return "duplicate", None
    return "", scenario
