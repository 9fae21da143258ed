"""The Responses API on the chat path: a ``/v1/responses`` body -> a chat request, a reply -> output items.

The input items become the chat messages vLLM builds from them, so the prompt is rendered by the one
chat template of :mod:`.chat` and nothing is injected; replies are split by the same parsers.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..errors import BadRequestError, validation_message
from .chat import PreparedChat, split_reply
from .openai_types import ChatCompletionRequest
from .responses_types import ResponsesRequest

if TYPE_CHECKING:
    from ..state import ServerState
    from .engine.base import GeneratedSequence

__all__ = ["new_item_id", "new_response_id", "output_items", "response_object", "to_chat_request", "usage"]

#: text part types of message content (input and output side)
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_ROLES = frozenset({"user", "system", "developer", "assistant"})


def new_response_id() -> str:
    """A fresh response id, ``resp_<48 hex>``; it keys the response's exact-token record."""
    return f"resp_{secrets.token_hex(24)}"


def new_item_id(prefix: str) -> str:
    """A fresh output item id: ``msg_``, ``fc_`` or ``rs_`` then 32 hex digits."""
    return f"{prefix}_{secrets.token_hex(16)}"


def _text(content: Any, param: str, *, role: str) -> str:
    """Message content as text: a string, or text / refusal parts joined by newlines (as on chat)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequestError(f"{param} must be a string or a list of content parts", param=param)
    texts: list[str] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and role == "assistant" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise BadRequestError(
                f"{param}[{j}] has type {kind!r}; this server serves a text-only model: "
                "send 'input_text' parts",
                param=f"{param}[{j}]",
            )
    return "\n".join(texts)


def _reasoning_text(item: dict[str, Any]) -> str:
    """The text of a reasoning item: its ``reasoning_text`` content, else its summary."""
    parts = item.get("content") or item.get("summary") or []
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def _messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    """The chat messages of ``instructions`` and ``input``.

    Consecutive reasoning, assistant message and ``function_call`` items make one assistant turn
    (reasoning, then text, then calls), as the model produced them; ``function_call_output``
    becomes a tool message.
    """
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        return [*messages, {"role": "user", "content": body.input}]
    turn: dict[str, Any] | None = None  # the assistant turn being assembled

    def assistant(*, fresh_if: tuple[str, ...]) -> dict[str, Any]:
        nonlocal turn
        if turn is None or any(turn.get(key) for key in fresh_if):
            turn = {"role": "assistant", "content": None}
            messages.append(turn)
        return turn

    for i, item in enumerate(body.input):
        param = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                roles = ", ".join(sorted(_ROLES))
                raise BadRequestError(f"{param}.role is {role!r}; use one of {roles}", param=param)
            text = _text(item.get("content"), f"{param}.content", role=role)
            if role == "assistant":
                assistant(fresh_if=("content", "tool_calls"))["content"] = text
            else:
                turn = None
                messages.append({"role": role, "content": text})
        elif kind == "function_call":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("name"), str):
                raise BadRequestError(
                    f"{param} (a function_call) needs a string 'call_id' and 'name'", param=param
                )
            function = {"name": item["name"], "arguments": item.get("arguments") or "{}"}
            call = {"id": item["call_id"], "type": "function", "function": function}
            target = assistant(fresh_if=())
            target["tool_calls"] = [*(target.get("tool_calls") or []), call]
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise BadRequestError(
                    f"{param} (a function_call_output) needs a string 'call_id'", param=param
                )
            turn = None
            output = _text(item.get("output"), f"{param}.output", role="tool")
            messages.append({"role": "tool", "content": output, "tool_call_id": item["call_id"]})
        elif kind == "reasoning":
            text = _reasoning_text(item)
            if text:  # encrypted-only reasoning (another provider's) has nothing to render
                assistant(fresh_if=("reasoning_content", "content", "tool_calls"))["reasoning_content"] = text
        else:
            raise BadRequestError(
                f"{param} has type {kind!r}; this server accepts message, function_call, "
                "function_call_output and reasoning items (no hosted tools, no item references)",
                param=param,
            )
    return messages


def _tools(body: ResponsesRequest) -> list[dict[str, Any]] | None:
    if body.tools is None:
        return None
    tools = []
    for i, tool in enumerate(body.tools):
        if tool.get("type") != "function":
            raise BadRequestError(
                f"tools[{i}] has type {tool.get('type')!r}; this server serves function tools only "
                "(hosted tools such as web_search, file_search, mcp or code_interpreter run at OpenAI)",
                param=f"tools[{i}].type",
            )
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadRequestError(
        f"tool_choice {choice!r} is not supported: use 'auto', 'none', 'required' or "
        "{'type': 'function', 'name': ...}",
        param="tool_choice",
    )


def _response_format(body: ResponsesRequest) -> dict[str, Any] | None:
    fmt = body.text.format if body.text is not None else None
    if fmt is None:
        return None
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    schema = {"name": fmt.name, "description": fmt.description, "schema": fmt.schema_, "strict": fmt.strict}
    return {"type": "json_schema", "json_schema": schema}


#: fields copied as they are onto the chat request
_SAME = ("model", "parallel_tool_calls", "temperature", "top_p", "seed", "stop", "frequency_penalty",
         "presence_penalty", "repetition_penalty", "top_k", "min_p", "min_tokens", "logit_bias",
         "chat_template_kwargs")  # fmt: skip


def to_chat_request(body: ResponsesRequest) -> ChatCompletionRequest:
    """The chat-completions request that renders and samples exactly what ``body`` asks for.

    Raises:
        BadRequestError: an input item, tool or option this server cannot serve, named.
    """
    if body.top_logprobs and not body.wants_logprobs:
        raise BadRequestError(
            "top_logprobs needs the logprobs: add 'message.output_text.logprobs' to 'include'",
            param="top_logprobs",
        )
    fields: dict[str, Any] = {name: getattr(body, name) for name in _SAME if getattr(body, name) is not None}
    fields.update(
        messages=_messages(body),
        tools=_tools(body),
        tool_choice=_tool_choice(body.tool_choice),
        response_format=_response_format(body),
        max_tokens=body.max_output_tokens,
        logprobs=body.wants_logprobs or None,
        top_logprobs=body.top_logprobs if body.wants_logprobs else None,
    )
    try:
        return ChatCompletionRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        message, _ = validation_message(exc.errors())
        raise BadRequestError(
            f"the request does not convert to a chat request: {message}", param="input"
        ) from exc


def output_items(
    sequence: GeneratedSequence, prepared: PreparedChat, state: ServerState
) -> list[dict[str, Any]]:
    """The output items of one finished reply: reasoning, the assistant message, the function calls."""
    reasoning, content, calls = split_reply(sequence.text, prepared)
    status = "incomplete" if sequence.finish_reason == "length" else "completed"
    items: list[dict[str, Any]] = []
    if reasoning and reasoning.strip():  # an empty thinking block (a forced call's) is no reasoning item
        items.append(reasoning_item(new_item_id("rs"), reasoning, status))
    if content or not calls:
        logprobs = None
        if prepared.want_logprobs:
            logprobs = state.token_texts.content(
                sequence.text_token_ids, sequence.logprobs, sequence.top_logprobs
            )
        items.append(message_item(new_item_id("msg"), content or "", status, logprobs))
    items.extend(
        function_call_item(new_item_id("fc"), call.id, call.name, call.arguments, "completed")
        for call in calls
    )
    return items


def reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """A ``reasoning`` output item with the model's reasoning as ``reasoning_text`` (no summary is made)."""
    return {"type": "reasoning", "id": item_id, "summary": [], "status": status,
            "content": [{"type": "reasoning_text", "text": text}] if text else []}  # fmt: skip


def message_item(
    item_id: str, text: str | None, status: str, logprobs: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """An assistant ``message`` output item with one ``output_text`` part (none while ``text`` is None)."""
    content = [] if text is None else [output_text_part(text, logprobs)]
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def output_text_part(text: str, logprobs: list[dict[str, Any]] | None) -> dict[str, Any]:
    """An ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    """A ``function_call`` output item; ``call_id`` is what a ``function_call_output`` answers."""
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}  # fmt: skip


def usage(prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    """The Responses ``usage`` object (no cache here; reasoning tokens are not counted apart)."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + output_tokens,
    }


def response_object(
    body: ResponsesRequest,
    prepared: PreparedChat,
    output: list[dict[str, Any]],
    *,
    status: str,
    usage_body: dict[str, Any] | None,
) -> dict[str, Any]:
    """The ``response`` object: the request's settings echoed, ``output`` and ``status``.

    ``status`` ``incomplete`` (the reply hit ``max_output_tokens``) carries ``incomplete_details``.
    """
    params = prepared.generation.params
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    return {
        "id": prepared.completion_id,
        "object": "response",
        "created_at": prepared.created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "model": body.model,
        "output": output,
        "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        "previous_response_id": None,
        "reasoning": None,
        "store": bool(body.store) if body.store is not None else True,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_logprobs": body.top_logprobs,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "tools": body.tools or [],
        "truncation": "disabled",
        "usage": usage_body,
        "metadata": body.metadata or {},
        "user": body.user,
    }
