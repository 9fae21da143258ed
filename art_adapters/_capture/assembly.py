"""Turning recorded model and tool calls into a :class:`~art_adapters._trajectory.Trajectory`.

Both capture paths (the LangChain callback handler in :mod:`.recorder` and the OpenTelemetry span
processor in :mod:`.otel_trace`) end with the same material: the run's model calls and tool executions.
Assembling it here makes both build trajectories the same way. Nothing here knows about LangChain,
OpenTelemetry or threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from art_adapters._trajectory import History, Message, ToolCallRecord, ToolSchema, Trajectory

__all__ = [
    "ModelCall",
    "ModelCallLike",
    "assemble",
    "conversations",
    "message_key",
    "model_name",
    "usage_totals",
]

#: What instrumentations write when they do not know the model (OpenLLMetry writes ``"unknown"``).
_NO_MODEL_NAMES = frozenset({"", "unknown", "none", "null"})


def model_name(*candidates: Any) -> str | None:
    """The first candidate that is a real model name (a non-empty string other than ``"unknown"``).

    Shared by both capture paths, so a placeholder never passes for a model: a turn whose
    model is unknown stays ``None`` and is trained like the policy's, where a made-up name
    would keep it out of training.
    """
    for value in candidates:
        if isinstance(value, str) and value.strip().lower() not in _NO_MODEL_NAMES:
            return value.strip()
    return None


class ModelCallLike(Protocol):
    """What assembly needs from a model call (:class:`ModelCall`, or the OTel side's ``SpanModelCall``)."""

    messages: list[Message]
    tools: list[ToolSchema] | None
    output: Message | None
    usage: dict[str, int]
    error: str | None
    model: str | None


@dataclass
class ModelCall:
    """One chat-model call, as a capture path recorded it.

    Attributes:
        messages: the input messages, OpenAI format.
        tools: the tools offered to the model, ``None`` when none were bound.
        output: the assistant message produced; ``None`` while running or when the call failed.
        usage: token counts (``prompt_tokens``, ``completion_tokens``, ``total_tokens``).
        error: ``"Type: message"`` when the call failed.
        model: the model's name as the call reported it (response first, else request);
            ``None`` when it did not say.
    """

    messages: list[Message]
    tools: list[ToolSchema] | None = None
    output: Message | None = None
    usage: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    model: str | None = None


def message_key(message: Message) -> tuple[Any, ...]:
    """What makes two messages the same turn (everything the model sees; not our completion link)."""
    calls = message.tool_calls
    return (
        message.role,
        message.content if not isinstance(message.content, list) else repr(message.content),
        message.name,
        message.tool_call_id,
        tuple((c.id, c.function.name, c.function.arguments) for c in calls) if calls else None,
    )


def conversations(calls: Sequence[ModelCallLike]) -> list[History]:
    """One history per distinct conversation of the ordered *calls*: extensions replace, divergences add.

    Message objects are placed, not copied: each call's messages end up in at most one history.
    Assistant turns get their ``generated`` marker and their ``model`` (see
    :func:`_mark_generated`), and each call's output its token usage (``usage``, when the
    call reported any).
    """
    histories: list[History] = []
    keys_of: list[list[tuple[Any, ...]]] = []
    for call in calls:
        conversation = list(call.messages)
        if call.output is not None:
            if call.usage:
                call.output.usage = dict(call.usage)
            if call.model is not None and call.output.model is None:
                call.output.model = call.model
            conversation.append(call.output)
        _name_tool_results(conversation)
        keys = [message_key(m) for m in conversation]
        for index, history in enumerate(histories):
            known = keys_of[index]
            if keys[: len(known)] == known:  # extends (or equals) this history
                history.messages = history.messages + conversation[len(known) :]
                if call.tools is not None:
                    history.tools = call.tools
                keys_of[index] = keys
                break
            if known[: len(keys)] == keys:  # already contained in this history
                _copy_completion_ids(conversation, history.messages)
                break
        else:
            histories.append(History.model_construct(messages=conversation, tools=call.tools))
            keys_of.append(keys)
    _mark_generated(calls, histories)
    return histories


def _mark_generated(calls: Sequence[ModelCallLike], histories: list[History]) -> None:
    """Set ``generated`` (and ``model``, where known) on every assistant turn of *histories*.

    ``True``: the turn is (the same turn as) the output of one of *calls*. Otherwise the turn
    was only ever input: ``False`` (prompt, e.g. a few-shot example), unless a call that
    started before its first appearance has no recorded output (it failed, was still
    running, or capture could not convert it) and so might have produced it: then ``None``
    (unknown, trained as before).

    A produced turn also gets the model name and completion id of the call that produced it
    (the first such call, when two produced the same turn) where it is another call's input
    in a history of its own: a planner's reply that the policy then reads is still the
    planner's turn, and a policy's turn that a reviewer reads is still the same sampled turn
    (training uses it once, with the tokens and context it was sampled in, never a
    re-tokenised copy in the reviewer's context).
    """
    produced: dict[tuple[Any, ...], Message] = {}
    for call in calls:
        if call.output is not None:
            produced.setdefault(message_key(call.output), call.output)
    input_only: dict[tuple[Any, ...], bool | None] = {}
    output_missing = False
    for call in calls:
        for message in call.messages:
            if message.role == "assistant":
                key = message_key(message)
                if key not in produced:
                    input_only.setdefault(key, None if output_missing else False)
        output_missing = output_missing or call.output is None
    for history in histories:
        for message in history.messages:
            if message.role == "assistant":
                key = message_key(message)
                source = produced.get(key)
                if source is not None:
                    message.generated = True
                    if message.model is None:
                        message.model = source.model
                    if message.completion_id is None:
                        message.completion_id = source.completion_id
                else:
                    message.generated = input_only.get(key)


def _name_tool_results(conversation: list[Message]) -> None:
    """Give tool results without a ``name`` the name of the function they answer.

    Conventions differ (LangChain's ``ToolMessage`` has the name, GenAI ``tool_call_response``
    parts do not), so both capture paths agree on the same run.
    """
    names: dict[str, str] = {}
    for message in conversation:
        if message.tool_calls:
            names.update((call.id, call.function.name) for call in message.tool_calls if call.id)
        elif message.role == "tool" and message.name is None and message.tool_call_id in names:
            message.name = names[message.tool_call_id]


def _copy_completion_ids(source: list[Message], target: list[Message]) -> None:
    """Copy completion ids (usage, model) of a conversation contained in *target* onto the turns it shares."""
    for src, dst in zip(source, target, strict=False):
        if src.completion_id is not None and dst.completion_id is None:
            dst.completion_id = src.completion_id
        if src.usage is not None and dst.usage is None:
            dst.usage = dict(src.usage)
        if src.model is not None and dst.model is None:
            dst.model = src.model


def usage_totals(calls: Sequence[ModelCallLike]) -> dict[str, int]:
    """Token usage summed over *calls* (keys present in any call)."""
    total: dict[str, int] = {}
    for call in calls:
        for key, value in call.usage.items():
            total[key] = total.get(key, 0) + value
    return total


def assemble(
    calls: Sequence[ModelCallLike], tool_records: Sequence[ToolCallRecord], **fields: Any
) -> Trajectory:
    """The trajectory of one run from its model calls (in start order) and tool records (in order).

    * each model call's conversation is its input messages plus its output (tool results
      without a ``name`` get the name of the function call they answer);
    * a conversation that extends an earlier one replaces it; one already contained in an
      earlier one is dropped (its completion ids copied over); one that diverges is kept
      as an additional history, so no history is ever lost;
    * the longest conversation is the trajectory's ``messages``;
    * each assistant turn is marked ``generated=True`` when it is the output of one of the
      run's model calls, and ``generated=False`` when it only ever appeared in model inputs
      (a hand-written few-shot example, history carried over from an earlier run), so
      training keeps it out of the loss; ``None`` (unknown) when an earlier call of the run
      has no recorded output and so might have produced it;
    * each assistant turn a model call produced carries that call's model name
      (``Message.model``), also where the turn reappears in another call's input, so a graph
      with several models (a planner, a summariser, the trained policy) says whose turn is whose;
    * each model call's token usage is kept on its output message (``Message.usage``) and
      summed into ``metrics`` with ``model_calls`` and ``tool_calls``, and each failed model
      call gets a line in ``logs``.

    Args:
        calls: the run's chat-model calls, ordered by start.
        tool_records: the run's tool executions, ordered by start.
        **fields: further :class:`~art_adapters._trajectory.Trajectory` fields
            (``metadata``, ``error``, ``started_at``...).
    """
    histories = conversations(calls)
    main = max(histories, key=lambda h: len(h.messages), default=History())
    trajectory = Trajectory(
        messages=main.messages,
        tools=main.tools,
        additional_histories=[h for h in histories if h is not main],
        tool_records=list(tool_records),
        **fields,
    )
    for call in calls:
        if call.error is not None:
            trajectory.logs.append(f"model call failed: {call.error}")
    trajectory.metrics.update(usage_totals(calls))
    trajectory.metrics["model_calls"] = len(calls)
    trajectory.metrics["tool_calls"] = len(trajectory.tool_records)
    return trajectory
