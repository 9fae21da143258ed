"""A deterministic chat model (and agent factory) for capture tests: replies are a pure function of the input messages.

``PolicyChatModel`` answers each call with ``policy(messages)`` (so concurrent runs get
their own deterministic replies), accepts ``bind_tools`` like a real provider model
(the tools end up in the call's ``invocation_params``), reports token usage and a
``chatcmpl-`` completion id the way ``ChatOpenAI`` does (``llm_output["id"]``), and
streams: content word by word, then each tool call as a tool-call chunk. Given a ``model``,
it names it the way ``ChatOpenAI`` does: in the call's invocation params and LangChain's
``ls_model_name``; given a ``served_model``, its responses report that name
(``llm_output["model_name"]`` and ``response_metadata["model_name"]``).

``NamedFakeChatModel`` is langchain-core's ``FakeMessagesListChatModel`` with a model name,
:func:`review_graph` a LangGraph graph in which two chat models share one conversation, and
:func:`chain_graph` any graph whose nodes run one after another.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph.message import add_messages

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
    model: str | None = None
    served_model: str | None = None

    @property
    def _llm_type(self) -> str:
        return "policy-fake"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model} if self.model else {}

    def _response_metadata(self) -> dict[str, Any]:
        return {"model_name": self.served_model} if self.served_model else {}

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
        metadata = {**reply.response_metadata, **self._response_metadata()}
        reply = reply.model_copy(
            update={"usage_metadata": self._usage(messages, reply), "response_metadata": metadata}
        )
        return ChatResult(
            generations=[ChatGeneration(message=reply)],
            llm_output={"id": completion_id_for(messages), **self._response_metadata()},
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
            message=AIMessageChunk(
                content="",
                usage_metadata=self._usage(messages, reply),
                response_metadata=self._response_metadata(),
            )
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


def call_once(name: str, args: dict[str, Any], call_id: str, answer: Callable[[str], str]) -> Policy:
    """A policy that calls the tool ``name`` with ``args`` once, then answers ``answer(its last result)``."""

    def policy(messages: list[BaseMessage]) -> AIMessage:
        results = [m.text for m in messages if m.type == "tool"]
        if not results:
            call = {"name": name, "args": args, "id": call_id, "type": "tool_call"}
            return AIMessage(content="", tool_calls=[call])
        return AIMessage(content=answer(results[-1]))

    return policy


def react_agent(model, tools, **kwargs):
    """``langgraph.prebuilt.create_react_agent`` (deprecated in LangGraph 1.x, still what many graphs use)."""
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return create_react_agent(model, tools, prompt="You are a calculator.", **kwargs)


class NamedFakeChatModel(FakeMessagesListChatModel):
    """langchain-core's ``FakeMessagesListChatModel`` (replies cycle through ``responses``) with a
    model name, reported as provider chat models report theirs: ``invocation_params["model"]``
    and LangChain's ``ls_model_name`` (responses carry no name)."""

    model: str

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model}


class ReviewState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


POLICY_SYSTEM = "Answer in one short sentence."
REVIEW_SYSTEM = "You review answers. Say what to improve."


def chain_graph(state: type, *nodes: tuple[str, Any]) -> Any:
    """A compiled LangGraph graph over ``state`` that runs ``(name, node)`` pairs in order, START to END."""
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(state)
    for name, node in nodes:
        builder.add_node(name, node)
    names = [START, *(name for name, _ in nodes), END]
    for source, target in zip(names, names[1:], strict=False):
        builder.add_edge(source, target)
    return builder.compile()


def review_graph(policy: Any, reviewer: Any) -> Any:
    """draft (policy) -> review (another model, its own system prompt) -> revise (policy), one message list.

    The reviewer's turn is in the conversation the policy answers last, so the run's main
    history holds both models' turns: ``system, user, draft, review, revision``.
    """
    def draft(state: ReviewState) -> dict:
        return {"messages": [policy.invoke([SystemMessage(POLICY_SYSTEM), *state["messages"]])]}

    def review(state: ReviewState) -> dict:
        return {"messages": [reviewer.invoke([SystemMessage(REVIEW_SYSTEM), *state["messages"]])]}

    return chain_graph(ReviewState, ("draft", draft), ("review", review), ("revise", draft))
