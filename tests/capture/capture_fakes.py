"""A deterministic chat model (and agent factory) for capture tests: replies are a pure function of the input messages.

``PolicyChatModel`` answers each call with ``policy(messages)`` (so concurrent runs get
their own deterministic replies), accepts ``bind_tools`` like a real provider model
(the tools end up in the call's ``invocation_params``), reports token usage and a
``chatcmpl-`` completion id the way ``ChatOpenAI`` does (``llm_output["id"]``), and
streams: content word by word, then each tool call as a tool-call chunk.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

Policy = Callable[[list[BaseMessage]], AIMessage]


def completion_id_for(messages: Sequence[BaseMessage]) -> str:
    """A stable ``chatcmpl-<hex>`` id derived from the conversation."""
    text = json.dumps([[m.type, str(m.content)] for m in messages])
    return "chatcmpl-" + hashlib.sha1(text.encode()).hexdigest()[:16]


class PolicyChatModel(BaseChatModel):
    """Test-only chat model; see the module docstring."""

    policy: Policy
    streamed_calls: int = 0
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "policy-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """Bind tools as OpenAI function schemas, like provider chat models do."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.calls += 1
        return self.policy(messages)

    def _usage(self, messages: list[BaseMessage], reply: AIMessage) -> dict[str, int]:
        prompt = sum(len(str(m.content).split()) + 1 for m in messages)
        completion = len(str(reply.content).split()) + 3 * len(reply.tool_calls)
        return {"input_tokens": prompt, "output_tokens": completion, "total_tokens": prompt + completion}

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        reply = self._reply(messages)
        reply = reply.model_copy(update={"usage_metadata": self._usage(messages, reply)})
        return ChatResult(
            generations=[ChatGeneration(message=reply)], llm_output={"id": completion_id_for(messages)}
        )

    def _chunks(self, messages: list[BaseMessage]) -> Iterator[ChatGenerationChunk]:
        self.streamed_calls += 1
        reply = self._reply(messages)
        content = str(reply.content)
        for token in re.split(r"(\s)", content) if content else []:
            yield ChatGenerationChunk(message=AIMessageChunk(content=token))
        for index, call in enumerate(reply.tool_calls):
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {
                            "name": call["name"],
                            "args": json.dumps(call["args"]),
                            "id": call["id"],
                            "index": index,
                        }
                    ],
                )
            )
        yield ChatGenerationChunk(
            message=AIMessageChunk(content="", usage_metadata=self._usage(messages, reply))
        )

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            if run_manager:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages):
            if run_manager:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def calculator_policy(messages: list[BaseMessage]) -> AIMessage:
    """Asked "what is A + B times C?": call add(A, B) and multiply(B, C) in parallel, then answer from the results."""
    last = messages[-1]
    if last.type == "human":
        numbers = [int(n) for n in re.findall(r"-?\d+", str(last.content))]
        a, b, c = (numbers + [1, 1, 1])[:3]
        tag = f"{a}_{b}_{c}"
        return AIMessage(
            content="Let me compute.",
            tool_calls=[
                {"name": "add", "args": {"a": a, "b": b}, "id": f"call_add_{tag}", "type": "tool_call"},
                {"name": "multiply", "args": {"a": b, "b": c}, "id": f"call_mul_{tag}", "type": "tool_call"},
            ],
        )
    results = [m.text for m in messages if m.type == "tool"]
    return AIMessage(content=f"The results are {' and '.join(results[-2:])}.")


def react_agent(model, tools, **kwargs):
    """``langgraph.prebuilt.create_react_agent`` (deprecated in LangGraph 1.x, still what many graphs use)."""
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return create_react_agent(model, tools, prompt="You are a calculator.", **kwargs)
