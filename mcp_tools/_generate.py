"""``generate_scenarios``: a chat model writes tasks that need an MCP server's tools.

The writer reads the tools (and resources) and answers JSON constrained by a schema where it
supports one; every item is checked, and the valid, new ones are kept (and saved) as they come,
until there are ``n`` or too many calls kept nothing. The prompt lives in
:mod:`mcp_tools._generate_prompt`, item checks in :mod:`mcp_tools._answers`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
from mcp_tools._topic import Topic, on_topic, topic_words
from mcp_tools._budget import discover_context_tokens, is_context_overflow
from mcp_tools._generate_prompt import (
    PLAIN_TASK_PATTERN,
    SYSTEM_PROMPT,
    Prompt,
    answer_schema,
    describe_tools,
    tool_spec,
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
from mcp_tools._session import McpSession

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

logger = logging.getLogger(__name__)

__all__ = [
    "PLAIN_TASK_PATTERN",
    "SYSTEM_PROMPT",
    "ScenarioGenerationError",
    "answer_schema",
    "default_generator",
    "describe_tools",
    "generate_scenarios",
]

_SCHEMA_NAME = "scenarios"
_GIVE_UP_ADVICE = "Raise max_retries, use a stronger model, or write the missing scenarios by hand"


class ScenarioGenerationError(ArtAdaptersError):
    """The generator did not produce enough valid, distinct scenarios after its retries.

    Attributes:
        scenarios: the valid scenarios kept so far (those read back from ``save_to`` first).
        saved_to: the file they are already saved in (``save_to``), or ``None``.
    """

    def __init__(
        self, message: str, *, scenarios: Sequence[Scenario] = (), saved_to: Path | None = None
    ) -> None:
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
    n: int,
    batch_size: int,
    max_retries: int,
    max_task_chars: int,
    task_pattern: str | None,
    context_tokens: Any,
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


async def generate_scenarios(  # shape: the public API: 16 options, each documented below
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
    topic_check: bool = False,
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
        topic_check: reject a task off the tools' topic (rejection reason "off topic"): it
            must share a content word with the tools (names, descriptions, parameters) or two
            with the resources' text; function words and generic request words ("show",
            "task", "easy") do not count (see ``mcp_tools._topic.on_topic``). Off by default:
            it also rejects on-topic tasks in other words ("what I wrote about the dentist");
            ``train-mcp`` turns it on for its small local writer.

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
    specs, resources = await _tool_specs(tools, resources)
    generator = _generator(model)
    target = Path(save_to) if save_to is not None else None
    run = _Run.start(n, batch_size, max_retries, existing, _read_saved(target)[:n] if target else [], target)
    if run.done:
        return run.accepted
    prompt = Prompt(
        describe_tools(specs), len(specs), resources or (), instructions,
        await _context_tokens(generator, context_tokens), max_task_chars, task_pattern,
    )  # fmt: skip
    tool_names = [spec["name"] for spec in specs]
    topic = topic_words(specs, resources or ()) if topic_check else Topic(frozenset())
    while run.going:
        count = run.next_call()
        messages, trimmed = prompt.request(generator, count, [*run.existing, *run.accepted], run.bad_tasks)
        run.note_trimmed(trimmed)
        items = await _ask_batch(_reseeded(generator, run.calls - 1), messages, prompt.schema(count), run,
                                 structured=structured, timeout_s=timeout_s)  # fmt: skip
        if items is not None:
            _keep(items, run, tool_names, prompt, on_accept, topic)
        run.end_call()
    if not run.done:
        last = f"last error: {run.last_error}. " if run.last_error else ""
        raise run.failure(f"{last}{_GIVE_UP_ADVICE}")
    return run.accepted


@dataclass
class _Run:
    """One generation run: what it kept and rejected so far, and when it stops.

    It stops with ``n`` scenarios, or once more than ``max_retries`` calls kept nothing: a call
    that keeps at least one scenario is progress (at most ``n`` such calls) and uses no retry.
    """

    n: int
    batch: int
    max_retries: int
    existing: list[Scenario]
    accepted: list[Scenario]
    target: Path | None = None
    seen: set[str] = field(default_factory=set)
    rejected: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    bad_tasks: list[tuple[str, str]] = field(default_factory=list)
    last_error: str | None = None
    calls: int = 0
    empty_calls: int = 0
    asked: int = 0
    added: int = 0
    reported_trim: bool = False

    @classmethod
    def start(
        cls, n: int, batch: int, max_retries: int, existing: Sequence[Scenario], saved: list[Scenario],
        target: Path | None,
    ) -> _Run:  # fmt: skip
        """A run that already has the *saved* scenarios and must differ from *existing* ones."""
        if saved:
            logger.info("scenario generator: %d of %d scenarios already in %s", len(saved), n, target)
        seen = {normalize_task(s.task) for s in [*existing, *saved]}
        return cls(n, batch, max_retries, list(existing), list(saved), target, seen)

    @property
    def done(self) -> bool:
        """Whether ``n`` scenarios are kept."""
        return len(self.accepted) >= self.n

    @property
    def going(self) -> bool:
        """Whether to call the writer again: fewer than ``n`` kept and retries left."""
        return not self.done and self.empty_calls <= self.max_retries

    def next_call(self) -> int:
        """Count a call; how many tasks it asks for (the missing ones, at most a batch)."""
        self.calls += 1
        self.added = 0
        self.asked = min(self.n - len(self.accepted), self.batch)
        return self.asked

    def note_trimmed(self, trimmed: int) -> None:
        """Log, once, that resources were cut to fit the context."""
        if trimmed and not self.reported_trim:
            self.reported_trim = True
            logger.info("scenario generator: %d resource(s) cut or left out to fit the context", trimmed)

    def call_failed(self, reason: str, error: str) -> None:
        """A call that produced no items: counted under *reason*, *error* kept for the final message."""
        self.last_error = f"call {self.calls}: {error}"
        self.rejected[reason] += 1
        logger.warning("scenario generator: %s", self.last_error)

    def answer_cut(self, complete: int) -> None:
        """An answer stopped at the token limit with *complete* items: ask for that many from now on."""
        self.batch = max(1, min(self.batch, complete or self.asked // 2))
        logger.info(
            "scenario generator call %d: answer cut at the token limit with %d complete item(s); "
            "asking for %d at a time",
            self.calls, complete, self.batch,
        )  # fmt: skip

    def reject(self, item: Any, reason: str) -> None:
        """Count a rejected item; remember its task so the next prompt shows it."""
        self.rejected[reason] += 1
        self.examples.setdefault(reason, repr(item)[:100])
        logger.debug("scenario generator: rejected %s (%s)", repr(item)[:200], reason)
        task = item.get("task") if isinstance(item, dict) else None
        if isinstance(task, str) and task.strip() and (task.strip()[:200], reason) not in self.bad_tasks:
            self.bad_tasks.append((task.strip()[:200], reason))

    def accept(self, scenario: Scenario) -> None:
        """Keep *scenario* (saved to ``target`` at once)."""
        self.seen.add(normalize_task(scenario.task))
        self.accepted.append(scenario)
        self.added += 1
        if self.target is not None:
            append_scenarios([scenario], self.target)

    def end_call(self) -> None:
        """After a call: one that kept nothing uses up a retry."""
        if self.added == 0:
            self.empty_calls += 1

    def failure(self, advice: str) -> ScenarioGenerationError:
        """The error for a run that stopped short: what was kept and where, what was rejected, *advice*."""
        return _failure(self.accepted, self.n, self.calls, self.rejected, self.examples, self.target, advice)


async def _tool_specs(
    tools: Any, resources: Sequence[Mapping[str, Any]] | None
) -> tuple[list[dict[str, Any]], Sequence[Mapping[str, Any]] | None]:
    """Each tool as ``{name, description, parameters}``, and the resources (a server's own, when listed).

    Raises:
        ConfigError: there are no tools.
    """
    if _is_server(tools):
        tools, listed = await _server_listing(tools)
        resources = listed if resources is None else resources
    tools = list(tools)
    if not tools:
        raise ConfigError(
            "no tools to write scenarios for: the tool list (or the server's tool listing) is empty"
        )
    return [tool_spec(t) for t in tools], resources


def _generator(model: BaseChatModel | None) -> Any:
    """*model*, or the configured judge; a ``ConfigError`` when neither is a chat model."""
    generator = model if model is not None else default_generator()
    if not hasattr(generator, "ainvoke"):
        raise ConfigError(f"model must be a LangChain chat model, got {type(generator).__name__}")
    return generator


async def _context_tokens(generator: Any, given: int | None) -> int | None:
    """The writer's context length: *given*, else asked from the model (``None``: unknown)."""
    tokens = given if given is not None else await discover_context_tokens(generator)
    logger.info(
        "scenario generator: context %s",
        f"{tokens} tokens" if tokens else "unknown (resources cut to a fixed size)",
    )
    return tokens


async def _ask_batch(
    generator: Any, messages: list[Any], schema: dict[str, Any], run: _Run, *, structured: bool,
    timeout_s: float | None,
) -> list[Any] | None:  # fmt: skip
    """One call: the answer's items, or ``None`` when it failed (timeout, malformed, endpoint error).

    Raises:
        ScenarioGenerationError: the endpoint says the prompt does not fit its context.
    """
    cut, items = False, None
    try:
        text, cut = await asyncio.wait_for(_ask(generator, messages, schema, structured), timeout_s)
        items = parse_items(text)
    except TimeoutError:
        waited = f"within {timeout_s:g}s" if timeout_s is not None else "(the model timed out)"
        run.call_failed("timeout", f"no answer {waited}")
    except ValueError as exc:
        run.call_failed("malformed answer", str(exc))
    except Exception as exc:  # noqa: BLE001 - endpoint errors (openai.APIError...) share no base; retried
        if is_context_overflow(exc):
            raise run.failure(
                f"the endpoint says the prompt does not fit the generator's context ({exc}); pass "
                "context_tokens= (the generator's context length) so the resources are trimmed to fit"
            ) from exc
        run.call_failed("endpoint error", f"{type(exc).__name__}: {exc}")
    if cut:
        run.answer_cut(len(items or []))
    return items


def _keep(
    items: Sequence[Any], run: _Run, tool_names: Sequence[str], prompt: Prompt,
    on_accept: Callable[[Scenario], object] | None, topic: Topic | None = None,
) -> None:  # fmt: skip
    """Check each item (shape, length, pattern, names no tool, on topic, new); keep the valid ones."""
    for item in items:
        if run.done:
            break
        reason, scenario = check_item(item, tool_names, run.seen, prompt.max_task_chars, prompt.task_pattern)
        if scenario is not None and topic is not None and not on_topic(scenario.task, topic):
            reason, scenario = "off topic", None
        if scenario is None:
            run.reject(item, reason)
            continue
        run.accept(scenario)
        if on_accept is not None:
            on_accept(scenario)
    logger.info(
        "scenario generator call %d: %d of %d asked accepted (%d/%d)",
        run.calls, run.added, run.asked, len(run.accepted), run.n,
    )  # fmt: skip


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
