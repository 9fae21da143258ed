"""Render OpenAI chat requests with the model's own Jinja chat template, exactly as vLLM does.

So a checkpoint trained on this backend's prompts meets the same prompts when served by ``vllm serve``
with the same ``--chat-template``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jinja2
from pydantic import BaseModel

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["ChatTemplate", "ChatTemplateError", "conversation", "tool_dicts"]


class ChatTemplateError(ValueError):
    """The chat template could not render a request; the message says what it objected to."""


def _as_dict(item: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    if isinstance(item, BaseModel):
        return item.model_dump(exclude_none=True, by_alias=True)
    return dict(item)


def _content_text(content: Any) -> str:
    """vLLM's string content: text (and refusal) parts joined by newlines; ``None`` is empty."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if isinstance(part, Mapping):
            if part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
            elif isinstance(part.get("text"), str):
                texts.append(part["text"])
        elif isinstance(part, str):
            texts.append(part)
    return "\n".join(texts)


def _arguments(value: Any) -> Any:
    """Tool-call arguments as the template sees them: parsed JSON, ``{}`` for anything else."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return {}
    return value if isinstance(value, (dict, list)) else {}


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """An assistant tool call as the template sees it: as sent, with its arguments parsed."""
    function = dict(call.get("function") or {})
    function["arguments"] = _arguments(function.get("arguments"))
    return {**call, "function": function}


def conversation(messages: Sequence[Mapping[str, Any] | BaseModel]) -> list[dict[str, Any]]:
    """OpenAI messages as the conversation vLLM hands to the chat template.

    Each message becomes ``{"role", "content"}`` with the content as one string (text parts joined
    by ``"\\n"``; ``null`` becomes ``""``), plus ``name``, an assistant's ``tool_calls`` with their
    ``arguments`` parsed from JSON to objects (a string that is not JSON becomes ``{}``; an empty list
    is dropped), its ``reasoning`` / ``reasoning_content`` (both keys, as vLLM sets them) and a tool
    message's ``tool_call_id``.
    """
    out: list[dict[str, Any]] = []
    for raw in messages:
        message = _as_dict(raw)
        role = message.get("role")
        item: dict[str, Any] = {"role": role, "content": _content_text(message.get("content"))}
        if role == "assistant":
            calls = [_as_dict(call) for call in message.get("tool_calls") or []]
            if calls:
                item["tool_calls"] = [_tool_call(call) for call in calls]
            reasoning = message.get("reasoning", message.get("reasoning_content"))
            if reasoning is not None:
                item["reasoning"] = item["reasoning_content"] = reasoning
        elif role == "tool" and "tool_call_id" in message:
            item["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            item["name"] = message["name"]
        out.append(item)
    return out


def tool_dicts(tools: Iterable[Mapping[str, Any] | BaseModel] | None) -> list[dict[str, Any]] | None:
    """Tools as vLLM passes them to the template (``None`` when there are none).

    Each is ``{"type": "function", "function": {"name", "description", "parameters"}}`` with ``None``
    for a missing description or parameters (vLLM dumps its pydantic model).
    """
    out = []
    for tool in tools or []:
        data = _as_dict(tool)
        function = dict(data.get("function") or {})
        # vLLM dumps its pydantic model: declared fields in order, then any extra ones
        declared = {key: function.pop(key, None) for key in ("name", "description", "parameters")}
        out.append({"type": data.get("type", "function"), "function": {**declared, **function}})
    return out or None


class ChatTemplate:
    """One model's chat template, rendering requests to text and token ids as vLLM does.

    vLLM's OpenAI server turns a chat request into a prompt in three steps, reproduced here: the
    :func:`conversation`, the :func:`tool_dicts`, then ``tokenizer.apply_chat_template(conversation,
    tools=..., chat_template=..., add_generation_prompt=True, tokenize=False, **chat_template_kwargs)``
    (:meth:`render`) and ``tokenizer(text, add_special_tokens=False)`` (:meth:`encode`).

    Nothing is injected: no system prompt the template does not add itself, no example. Like vLLM,
    special-token strings in message text are tokenised as the special tokens they spell; an agent
    that forwards untrusted text into its prompt should strip them, here and in deployment alike.

    Args:
        tokenizer: the model's tokenizer (its special tokens and ``apply_chat_template``).
        template: the Jinja template text (see :mod:`.model_family` for how it is chosen).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, template: str) -> None:
        self.tokenizer = tokenizer
        self.template = template

    def render(
        self,
        messages: Sequence[Mapping[str, Any] | BaseModel],
        tools: Iterable[Mapping[str, Any] | BaseModel] | None = None,
        *,
        add_generation_prompt: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """The prompt text.

        Raises:
            ChatTemplateError: the template raised (e.g. Jinja's ``raise_exception`` on a role
                order it does not allow); the message is the template's own.
        """
        kwargs = dict(chat_template_kwargs or {})
        for reserved in ("tools", "chat_template", "add_generation_prompt", "tokenize", "conversation"):
            kwargs.pop(reserved, None)
        try:
            text = self.tokenizer.apply_chat_template(
                conversation(messages),
                tools=tool_dicts(tools),
                chat_template=self.template,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **kwargs,
            )
        except (
            jinja2.TemplateError,  # raise_exception(...) in the template, undefined values, syntax
            TypeError,  # e.g. concatenating a missing field: None + str
            ValueError,
            KeyError,
            IndexError,
            AttributeError,
            RecursionError,  # tojson of a value nested past Python's recursion limit
        ) as exc:
            raise ChatTemplateError(f"the chat template could not render this request: {exc}") from exc
        return str(text)

    def encode(
        self,
        messages: Sequence[Mapping[str, Any] | BaseModel],
        tools: Iterable[Mapping[str, Any] | BaseModel] | None = None,
        *,
        add_generation_prompt: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """The prompt token ids: the rendered text tokenised without added special tokens."""
        text = self.render(
            messages, tools, add_generation_prompt=add_generation_prompt, chat_template_kwargs=chat_template_kwargs
        )
        return self.tokenize(text)

    def tokenize(self, text: str) -> list[int]:
        """The token ids of rendered prompt ``text`` (no special tokens added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @functools.cached_property
    def max_chars_per_token(self) -> int:
        """An upper bound on the characters of rendered text one token can stand for.

        So ``len(text) / max_chars_per_token`` is a lower bound on the prompt's token count,
        known before tokenising: the longest vocabulary entry (added tokens included; a
        byte-level BPE entry has one character per byte it decodes to), times 4 when the
        tokenizer normalises text first (Unicode composition can fold several characters into one).
        """
        vocab = self.tokenizer.get_vocab()
        longest = max((len(token) for token in vocab), default=1)
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        normalises = backend is None or getattr(backend, "normalizer", None) is not None
        return max(longest, 1) * (4 if normalises else 1)
