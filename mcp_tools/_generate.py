"""``generate_scenarios``: a chat model writes tasks that need an MCP server's tools.

The generator model reads every tool's name, description and argument schema (and the
server's resources, when it has any) and answers JSON constrained by a schema
(``with_structured_output(method="json_schema")``, i.e. ``response_format`` json_schema,
where the model supports it; plain JSON in the prompt otherwise). Each answer is checked
item by item: malformed items, tasks that name a tool, and duplicates of earlier tasks
(compared after :func:`~mcp_tools.normalize_task`) are dropped, and the model is asked
again for the missing ones, told which tasks it already wrote (a generator with a ``seed``
samples each retry with the next seed). The result is exactly
``n`` scenarios, or a :class:`ScenarioGenerationError` saying what went wrong.

Every valid scenario is kept: ``save_to=FILE`` appends each one to a JSONL file as it is
accepted (fsynced; :func:`~mcp_tools.load_scenarios` reads it) and a later call with the
same file generates only the missing ones; ``on_accept`` sees each one too; the error
carries the accepted ones. An answer cut at the token limit keeps its complete items, in
json_schema mode too, and the following calls ask for fewer at a time. The prompt is fitted
to the generator's context (:mod:`mcp_tools._budget`): tools first, resources trimmed.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from art_adapters import ArtAdaptersError, ConfigError
from art_adapters.ruler import judge_from_env
from art_adapters.structured_output import (
    NO_JSON_SCHEMA_MODE,
    answer_text,
    content_text,
    cut_off_text,
    finish_reason,
    json_schema_output,
    rejects_json_schema,
)
from mcp_tools._answers import check_item, parse_items
from mcp_tools._budget import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    UNKNOWN_CONTEXT_RESOURCE_CHARS,
    answer_reserve,
    describe_resources,
    discover_context_tokens,
    estimate_tokens,
    is_context_overflow,
)
from mcp_tools._scenarios import (
    MAX_TASK_CHARS,
    MIN_TASK_CHARS,
    Scenario,
    ScenarioFileError,
    append_scenarios,
    load_scenarios,
    normalize_task,
)

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

_SCHEMA_NAME = "scenarios"

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


class ScenarioGenerationError(ArtAdaptersError):
    """The generator did not produce enough valid, distinct scenarios after its retries.

    Attributes:
        scenarios: the valid scenarios kept so far (those read back from ``save_to`` first).
        saved_to: the file they are already saved in (``save_to``), or ``None``.
    """

    def __init__(self, message: str, *, scenarios: Sequence[Scenario] = (), saved_to: Path | None = None) -> None:
        super().__init__(message)
        self.scenarios: list[Scenario] = list(scenarios)
        self.saved_to = saved_to


def default_generator() -> BaseChatModel:
    """The configured judge (:func:`art_adapters.ruler.judge_from_env`) as the writer, at temperature 1.

    Raises:
        ConfigError: no judge is configured, or its settings are invalid.
    """
    found = judge_from_env(temperature=1.0)
    if found is None:
        raise ConfigError(
            "no generator model: pass model= (any LangChain chat model, e.g. ChatOpenAI(...) or "
            "model.chat_model()) or set $ART_ADAPTERS_JUDGE_MODEL (and $ART_ADAPTERS_JUDGE_BASE_URL, "
            "$ART_ADAPTERS_JUDGE_API_KEY; or $OPENAI_API_KEY alone for gpt-4o-mini) to configure the judge"
        )
    return found[0]


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


class _PromptTooLong(Exception):
    """The tools, guidance and request alone need more characters than the prompt may have."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


def _request_text(
    tools_text: str,
    resources: Sequence[Mapping[str, Any]],
    count: int,
    written: Sequence[Scenario],
    instructions: str | None,
    room: int | None,
    rejected: Sequence[tuple[str, str]] = (),
) -> tuple[str, int]:
    """The user message of one call in at most *room* characters (``None``: no overall limit).

    The tools, the guidance and the request always go in (:class:`_PromptTooLong` when they
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
        raise _PromptTooLong(needed)
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


async def _ask(model: Any, messages: list[Any], schema: dict[str, Any], structured: bool) -> tuple[str, bool]:
    """The answer's text and whether it stopped at the token limit (its complete items still count)."""
    if structured:
        try:
            runnable = json_schema_output(model, _SCHEMA_NAME, schema)
        except NO_JSON_SCHEMA_MODE as exc:
            logger.debug("generator %s: no json_schema structured output (%s); asking plainly", model, exc)
        else:
            try:
                result = await runnable.ainvoke(messages)
            except Exception as exc:
                partial = cut_off_text(exc)
                if partial is not None:
                    return partial, True
                if is_context_overflow(exc) or not rejects_json_schema(exc):
                    raise
                logger.warning("generator rejected the json_schema response format (%s); asking plainly", exc)
            else:
                return answer_text(result), finish_reason(result.get("raw")) == "length"
    reply = await model.ainvoke(messages)
    return content_text(reply.content), finish_reason(reply) == "length"


def _reseeded(model: Any, offset: int) -> Any:
    """*model* sampling with its ``seed`` + *offset*: a seeded generator's retries write new answers.

    A seeded sampler answers the same prompt with the same tasks, so a retry whose prompt barely
    changed (the same tasks rejected again) would be wasted. A model without a ``seed`` field, or
    with none set, samples afresh on every call anyway and is returned as it is.
    """
    seed = getattr(model, "seed", None)
    fields = getattr(type(model), "model_fields", {})
    if offset == 0 or "seed" not in fields or isinstance(seed, bool) or not isinstance(seed, int):
        return model
    return model.model_copy(update={"seed": seed + offset})


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


def _read_saved(path: Path) -> list[Scenario]:
    """The scenarios already in *path*; none when it is missing or blank."""
    try:
        if not path.read_text(encoding="utf-8").strip():
            return []
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioFileError(f"{path}: cannot read the scenarios file: {exc}") from exc
    return load_scenarios(path)


def _check_arguments(
    n: int, batch_size: int, max_retries: int, max_task_chars: int, task_pattern: str | None, context_tokens: Any
) -> None:
    for label, value, low in (("n", n, 1), ("batch_size", batch_size, 1), ("max_retries", max_retries, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{label} must be an int >= {low}, got {value!r}")
    if context_tokens is not None and (
        isinstance(context_tokens, bool) or not isinstance(context_tokens, int) or context_tokens < 1
    ):
        raise ConfigError(f"context_tokens must be an int >= 1 or None, got {context_tokens!r}")
    if not MIN_TASK_CHARS < max_task_chars <= MAX_TASK_CHARS:
        raise ConfigError(
            f"max_task_chars must be in ({MIN_TASK_CHARS}, {MAX_TASK_CHARS}], got {max_task_chars!r}"
        )
    if task_pattern is not None:
        try:
            re.compile(task_pattern)
        except re.error as exc:
            raise ConfigError(f"task_pattern is not a valid regular expression: {exc}") from exc


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
    save_to: str | Path | None = None,
    on_accept: Callable[[Scenario], object] | None = None,
    context_tokens: int | None = None,
) -> list[Scenario]:
    """Have *model* write *n* distinct, realistic tasks that need *tools* (without naming them).

    Args:
        tools: the server's tools: LangChain tools (from :func:`mcp_tools.load_tools`), MCP
            tool dicts, or OpenAI tool dicts; or a server itself (command, URL or config
            dict, as for ``load_tools``), whose tools and resources are then listed.
        n: how many scenarios, >= 1.
        model: the generator, any LangChain chat model (default: the configured judge, see
            :func:`default_generator`). A little temperature helps variety; a model with a
            ``seed`` (e.g. ``ChatOpenAI(seed=0)``) samples call *k* with ``seed + k``, so its
            retries are reproducible and not repeats.
        resources: the server's resources (``uri``, ``name``, ``description``, and
            ``text`` when read), shown to the generator so tasks fit the server's data
            (trimmed to fit its context, see *context_tokens*).
        instructions: extra guidance for the generator (domain, persona, style).
        batch_size: most scenarios asked for in one call; after an answer cut at the token
            limit, later calls ask for as many as that answer completed (at least 1).
        max_retries: further calls allowed after calls that kept no new scenario (malformed
            answer, only duplicates or tasks naming a tool, endpoint error, timeout). A call that
            keeps at least one scenario is progress and uses no retry, so at most
            ``n + max_retries + 1`` calls are made.
        structured: ask for ``response_format`` json_schema where the model supports it
            (an endpoint that answers it with HTTP 400/422 is asked plainly instead).
        timeout_s: seconds one generator call may take; ``None``: no limit.
        max_task_chars: longest task accepted, in characters.
        existing: scenarios you already have: the new ones differ from them, and the
            generator sees them; they are not returned.
        task_pattern: a regular expression every task must match, also sent in the schema
            (``pattern``) so constrained decoding enforces it; :data:`PLAIN_TASK_PATTERN`
            keeps small models on words. Default: none (any text of 3+ plain words).
        save_to: a JSONL scenarios file: each scenario is appended to it (and fsynced) as
            soon as it is accepted, so none is lost when a later call fails. Scenarios
            already in it count toward *n* and come first in the result: a second call with
            the same file generates only the missing ones (none when it holds *n* or more).
        on_accept: called with each scenario as it is accepted (after it is saved).
        context_tokens: the generator's context length in tokens. Default: asked from the
            model (LangChain profile, else the endpoint's ``/v1/models`` entry); see
            :mod:`mcp_tools._budget` for the estimate (characters / 3) and what happens
            when it stays unknown.

    Returns:
        Exactly *n* :class:`~mcp_tools.Scenario` objects, in the order written.

    Raises:
        ConfigError: an argument is invalid, no model is given or configured, or the tool
            descriptions alone do not fit the generator's context.
        ScenarioFileError: *save_to* holds an invalid line.
        ScenarioGenerationError: fewer than *n* valid distinct scenarios after the retries,
            or the endpoint said the prompt is too long; the message counts what was kept
            (and where it is saved) and what was rejected and why; ``.scenarios`` holds them.
        ToolServerError: *tools* is a server that could not be reached.
    """
    _check_arguments(n, batch_size, max_retries, max_task_chars, task_pattern, context_tokens)
    if _is_server(tools):
        tools, listed = await _server_listing(tools)
        resources = listed if resources is None else resources
    tools = list(tools)
    if not tools:
        raise ConfigError(
            "no tools to write scenarios for: the tool list (or the server's tool listing) is empty"
        )
    specs = [_tool_spec(t) for t in tools]
    tool_names = [s["name"] for s in specs]
    generator = model if model is not None else default_generator()
    if not hasattr(generator, "ainvoke"):
        raise ConfigError(f"model must be a LangChain chat model, got {type(generator).__name__}")
    tools_text = describe_tools(specs)
    target = Path(save_to) if save_to is not None else None
    accepted = _read_saved(target)[:n] if target is not None else []
    if accepted:
        logger.info("scenario generator: %d of %d scenarios already in %s", len(accepted), n, target)
    if len(accepted) >= n:
        return accepted
    if context_tokens is None:
        context_tokens = await discover_context_tokens(generator)
    logger.info(
        "scenario generator: context %s",
        f"{context_tokens} tokens" if context_tokens else "unknown (resources cut to a fixed size)",
    )

    from langchain_core.messages import HumanMessage, SystemMessage

    existing = list(existing)
    seen: set[str] = {normalize_task(s.task) for s in [*existing, *accepted]}
    rejected: Counter[str] = Counter()
    examples: dict[str, str] = {}
    last_error: str | None = None
    batch = batch_size
    shortfalls = calls = 0
    reported_trim = False
    bad_tasks: list[tuple[str, str]] = []
    while len(accepted) < n and shortfalls <= max_retries:
        calls += 1
        count = min(n - len(accepted), batch)
        room = reserve = None
        if context_tokens is not None:
            reserve = answer_reserve(generator, count, max_task_chars) + 2 * MESSAGE_OVERHEAD_TOKENS
            room = (context_tokens - reserve) * CHARS_PER_TOKEN - len(SYSTEM_PROMPT)
        try:
            request, trimmed = _request_text(
                tools_text, resources or (), count, [*existing, *accepted], instructions, room, bad_tasks
            )
        except _PromptTooLong as exc:
            needed = estimate_tokens(SYSTEM_PROMPT) + exc.needed // CHARS_PER_TOKEN
            raise ConfigError(
                f"the {len(specs)} tool descriptions alone need about {needed} tokens (estimated as "
                f"characters / {CHARS_PER_TOKEN}) but the generator's context holds {context_tokens}, "
                f"{reserve} of them kept for its answer: pass fewer tools (one server at a time), a "
                "generator with a longer context, or the right context_tokens= if that number is wrong"
            ) from None
        if trimmed and not reported_trim:
            reported_trim = True
            logger.info("scenario generator: %d resource(s) cut or left out to fit the context", trimmed)
        messages = [SystemMessage(SYSTEM_PROMPT), HumanMessage(request)]
        cut = False
        schema = answer_schema(count, max_task_chars, task_pattern)
        try:
            text, cut = await asyncio.wait_for(
                _ask(_reseeded(generator, calls - 1), messages, schema, structured), timeout_s
            )
            items = parse_items(text)
        except TimeoutError:
            waited = f"within {timeout_s:g}s" if timeout_s is not None else "(the model timed out)"
            last_error = f"call {calls}: no answer {waited}"
            rejected["timeout"] += 1
            items = None
        except ValueError as exc:
            last_error = f"call {calls}: {exc}"
            rejected["malformed answer"] += 1
            items = None
        except Exception as exc:  # noqa: BLE001 - endpoint errors (openai.APIError...) share no base; retried
            if is_context_overflow(exc):
                raise _failure(
                    accepted, n, calls, rejected, examples, target,
                    f"the endpoint says the prompt does not fit the generator's context ({exc}); pass "
                    "context_tokens= (the generator's context length) so the resources are trimmed to fit",
                ) from exc  # fmt: skip
            last_error = f"call {calls}: {type(exc).__name__}: {exc}"
            rejected["endpoint error"] += 1
            items = None
        if cut:
            complete = len(items or [])
            batch = max(1, min(batch, complete or count // 2))
            logger.info(
                "scenario generator call %d: answer cut at the token limit with %d complete item(s); "
                "asking for %d at a time",
                calls, complete, batch,
            )  # fmt: skip
        if items is None:
            logger.warning("scenario generator: %s", last_error)
            shortfalls += 1
            continue
        added = 0
        for item in items:
            if len(accepted) >= n:
                break
            reason, scenario = check_item(item, tool_names, seen, max_task_chars, task_pattern)
            if scenario is None:
                rejected[reason] += 1
                examples.setdefault(reason, repr(item)[:100])
                logger.debug("scenario generator: rejected %s (%s)", repr(item)[:200], reason)
                task = item.get("task") if isinstance(item, dict) else None
                if isinstance(task, str) and task.strip() and (task.strip()[:200], reason) not in bad_tasks:
                    bad_tasks.append((task.strip()[:200], reason))
                continue
            seen.add(normalize_task(scenario.task))
            accepted.append(scenario)
            added += 1
            if target is not None:
                append_scenarios([scenario], target)
            if on_accept is not None:
                on_accept(scenario)
        # a call that kept something made progress (at most n such calls); only empty calls use up retries
        if added == 0:
            shortfalls += 1
        logger.info(
            "scenario generator call %d: %d of %d asked accepted (%d/%d)", calls, added, count, len(accepted), n
        )
    if len(accepted) < n:
        hint = "Raise max_retries, use a stronger model, or write the missing scenarios by hand"
        raise _failure(
            accepted, n, calls, rejected, examples, target,
            f"{'last error: ' + last_error + '. ' if last_error else ''}{hint}",
        )  # fmt: skip
    return accepted


def _failure(
    accepted: Sequence[Scenario],
    n: int,
    calls: int,
    rejected: Counter[str],
    examples: Mapping[str, str],
    target: Path | None,
    advice: str,
) -> ScenarioGenerationError:
    """The error for a run that kept *accepted* of *n*: what was kept and where, what was rejected, *advice*."""
    why = ", ".join(f"{count} {reason}" for reason, count in rejected.most_common()) or "nothing rejected"
    detail = "; ".join(f"{reason}: {example}" for reason, example in examples.items())
    if target is not None:
        kept = (
            f"; they are saved in {target}: call again with the same save_to (train-mcp: run it again) to "
            f"generate only the missing {n - len(accepted)}"
        )
    else:
        kept = "; they are in this error's .scenarios (pass save_to= to keep them on disk)" if accepted else ""
    return ScenarioGenerationError(
        f"the generator wrote {len(accepted)} of {n} valid distinct scenarios in {calls} call(s){kept} "
        f"(rejected: {why}){'; e.g. ' + detail if detail else ''}. {advice}.",
        scenarios=accepted,
        saved_to=target,
    )
