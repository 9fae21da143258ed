"""Spans that follow the OpenInference conventions (Arize Phoenix, ``openinference-instrumentation-*``).

Arize Phoenix and the OpenInference instrumentations flatten messages into indexed attributes; this
module reads them back into the neutral :mod:`.otel_records` calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from art_adapters._capture import otel_records as records
from art_adapters._capture.assembly import model_name
from art_adapters._capture.otel_records import SpanModelCall, SpanToolCall
from art_adapters._trajectory import Message, ToolCall, ToolSchema

__all__ = ["parse_openinference_span"]


def parse_openinference_span(span: Any) -> SpanModelCall | SpanToolCall | None:
    """Turn a finished OpenInference ``LLM`` or ``TOOL`` span into a model or tool call.

    An ``LLM`` span (``openinference.span.kind``) is one model call: its flattened
    ``llm.input_messages.{i}.message.*`` and ``llm.output_messages.{i}.message.*``
    (``role``, ``content`` or ``contents.{j}.message_content.*``, ``name``,
    ``tool_call_id``, ``tool_calls.{j}.tool_call.{id,function.name,function.arguments}``),
    its tools ``llm.tools.{i}.tool.json_schema``, token counts ``llm.token_count.*`` and
    the model's name ``llm.model_name``; the completion id comes from :func:`_completion_id`.

    A ``TOOL`` span is one tool execution: ``tool.name``, ``tool_call.id`` when present,
    ``input.value`` (the arguments) and ``output.value`` (the result; a serialised
    LangChain ``ToolMessage`` is unwrapped to its content and ``tool_call_id``).
    """
    attributes = span.attributes or {}
    kind = attributes.get("openinference.span.kind")
    if kind == "LLM":
        return _model_call(span, attributes)
    if kind == "TOOL":
        return _tool_call(span, attributes)
    return None


def _model_call(span: Any, attributes: Mapping[str, Any]) -> SpanModelCall | None:
    messages = _messages(records.unflatten(attributes, "llm.input_messages."))
    outputs = _messages(records.unflatten(attributes, "llm.output_messages."))
    if not messages and not outputs:
        return None
    output = next((m for m in outputs if m.role == "assistant"), None)
    if output is not None:
        output.completion_id = _completion_id(attributes.get("output.value"))
    return SpanModelCall(
        span_id=span.context.span_id,
        start_ns=span.start_time or 0,
        messages=messages,
        tools=_tools(records.unflatten(attributes, "llm.tools.")),
        output=output,
        usage=_usage(attributes),
        error=records.span_error(span),
        model=model_name(attributes.get("llm.model_name")),
    )


def _tool_call(span: Any, attributes: Mapping[str, Any]) -> SpanToolCall | None:
    name = attributes.get("tool.name")
    if not isinstance(name, str) or not name:
        name = span.name
    arguments, result = attributes.get("input.value"), attributes.get("output.value")
    return records.tool_span_call(span, name, arguments, result, call_id=attributes.get("tool_call.id"))


def _messages(root: dict[str, Any]) -> list[Message]:
    messages: list[Message] = []
    for entry in records.indexed(root):
        data = entry.get("message") if isinstance(entry, dict) else None
        if not isinstance(data, dict):
            continue
        role = records.normalise_role(data.get("role"))
        if role is None:
            continue
        tool_calls: list[ToolCall] = []
        for raw in records.indexed(data.get("tool_calls")):
            call = raw.get("tool_call") if isinstance(raw, dict) else None
            if not isinstance(call, dict):
                continue
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            made = records.make_tool_call(call.get("id"), function.get("name"), function.get("arguments"))
            if made is not None:
                tool_calls.append(made)
        content: str | list[dict[str, Any]] | None = records.as_text(data.get("content"))
        if content is None:
            content = _contents(data.get("contents"))
        if role == "assistant" and content is None and tool_calls:
            content = ""
        tool_call_id = data.get("tool_call_id")
        name = data.get("name")
        messages.append(
            Message(
                role=role,  # type: ignore[arg-type]
                content=content,
                name=name if isinstance(name, str) and name else None,
                tool_calls=tool_calls or None,
                tool_call_id=str(tool_call_id) if tool_call_id else None,
            )
        )
    return messages


def _contents(node: Any) -> str | list[dict[str, Any]] | None:
    """Multi-part content: all-text parts joined into one string, otherwise OpenAI content parts."""
    parts: list[dict[str, Any]] = []
    for entry in records.indexed(node):
        content = entry.get("message_content") if isinstance(entry, dict) else None
        if not isinstance(content, dict):
            continue
        kind = content.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": records.as_text(content.get("text")) or ""})
        elif kind == "image" and isinstance(content.get("image"), dict):
            url = content["image"].get("image", {}).get("url") if isinstance(content["image"], dict) else None
            parts.append({"type": "image_url", "image_url": {"url": url}})
    if not parts:
        return None
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _tools(root: dict[str, Any]) -> list[ToolSchema] | None:
    tools: list[ToolSchema] = []
    for entry in records.indexed(root):
        tool = entry.get("tool") if isinstance(entry, dict) else None
        if not isinstance(tool, dict):
            continue
        schema = records.tool_schema_from_definition(tool.get("json_schema"))
        if schema is None and isinstance(tool.get("name"), str):
            schema = records.tool_schema_from_definition(
                {
                    "name": tool["name"],
                    "description": tool.get("description"),
                    "parameters": tool.get("parameters"),
                }
            )
        if schema is not None:
            tools.append(schema)
    return tools or None


def _completion_id(output_value: Any) -> str | None:
    """The provider's response id from ``output.value``, when the instrumentation recorded it.

    OpenInference has no attribute for the provider's response id, so it is read from
    ``output.value``: an OpenAI response's ``id``, or LangChain's ``llm_output.id`` / the
    message's ``response_metadata.id``.
    """
    data = records.load_json(output_value)
    if not isinstance(data, Mapping):
        return None
    if isinstance(data.get("id"), str) and ("choices" in data or "object" in data):
        return data["id"]  # a raw OpenAI chat completion
    llm_output = data.get("llm_output")
    if isinstance(llm_output, Mapping) and isinstance(llm_output.get("id"), str):
        return llm_output["id"]
    generations = data.get("generations")
    while isinstance(generations, list) and generations:
        generations = generations[0]
    if isinstance(generations, Mapping):
        message = records.unwrap_langchain_message(generations.get("message"))
        metadata = message.get("response_metadata") if message else None
        if isinstance(metadata, Mapping) and isinstance(metadata.get("id"), str):
            return metadata["id"]
    return None


def _usage(attributes: Mapping[str, Any]) -> dict[str, int]:
    usage: dict[str, int] = {}
    for key, name in (
        ("prompt", "prompt_tokens"),
        ("completion", "completion_tokens"),
        ("total", "total_tokens"),
    ):
        value = records.as_int(attributes.get(f"llm.token_count.{key}"))
        if value is not None:
            usage[name] = value
    return usage
