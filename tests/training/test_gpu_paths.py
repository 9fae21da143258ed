"""The other engine and trainer behind the same server: ``serve --engine vllm`` and ``--trainer unsloth``.

Each runs where its dependency imports (vLLM: installed and a CUDA GPU; Unsloth: installed, on
CPU too) and is skipped with the reason elsewhere; the vLLM one is marked ``gpu`` (``-m "not gpu"``
deselects it). Both go through the real HTTP API: sample, train one step, and the new checkpoint
answers as ``name@1``. On vLLM, tools, forced calls (``required`` and named) and ``response_format``
go through too. The vLLM engine's serve line, request bodies and response parsing are tested
without vLLM in ``tests/backend/test_vllm_engine.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import uuid
from pathlib import Path

import openai
import pytest
from art_adapters_backend.serving.engine.vllm_engine import vllm_available

from art_adapters import LocalBackend, TrainableModel, TrainConfig
from art_adapters._trajectory import Message
from tests.helpers.openai_tools import ADD_TOOL
from tests.helpers.sampled_groups import group_from_choices

pytestmark = pytest.mark.slow


async def _sample_train_serve(backend: LocalBackend) -> None:
    model = TrainableModel(name=f"gpu-{uuid.uuid4().hex[:6]}")
    await model.register(backend)
    client = model.openai_client()
    prompt = [Message(role="user", content="Name a fruit.")]
    response = await client.chat.completions.create(
        model=model.name, messages=[m.to_openai() for m in prompt], n=4, temperature=1.0, max_tokens=6, seed=3
    )
    record = await backend.get_token_record(response.id)
    for choice in record["choices"]:  # exact tokens with one log-prob each
        assert len(choice["logprobs"]) == len(choice["completion_token_ids"]) > 0
    group = group_from_choices(prompt, response, lambda c: float(c.index == 0))
    train = asyncio.create_task(model.train([group], config=TrainConfig(learning_rate=1e-4)))
    await asyncio.sleep(0.5)
    during = await client.chat.completions.create(  # waits while the engine is paused / asleep
        model=model.name, messages=[{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0
    )
    result = await train
    assert result.trained and result.step == 1 and result.metrics["record_turns"] == 4
    assert during.choices[0].finish_reason in ("stop", "length")
    after = await client.chat.completions.create(
        model=f"{model.name}@1", messages=[{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0
    )
    assert (await backend.get_token_record(after.id))["step"] == 1
    await client.close()


ADD = ADD_TOOL
MUL = {"type": "function", "function": {**ADD["function"], "name": "multiply", "description": "Multiply."}}


async def _tools_and_constraints(backend: LocalBackend) -> None:
    """Forced calls (required, named), a tools request and a JSON schema, parsed as on the torch engine."""
    client = openai.AsyncOpenAI(base_url=backend.openai_base_url, api_key="unused", max_retries=0)
    ask = [{"role": "user", "content": "What is 2 + 3? Use the add tool."}]
    model = "smollm2-135m-instruct"
    named = {"type": "function", "function": {"name": "multiply"}}
    for tools, choice, name in [([ADD], "required", "add"), ([ADD, MUL], named, "multiply")]:
        response = await client.chat.completions.create(
            model=model, messages=ask, tools=tools, tool_choice=choice, temperature=0, max_tokens=60
        )
        (call,) = response.choices[0].message.tool_calls or []
        assert call.function.name == name and response.choices[0].finish_reason == "tool_calls"
        args = json.loads(call.function.arguments)
        assert set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
        record = await backend.get_token_record(response.id)
        assert record["constrained"] and len(record["choices"][0]["logprobs"]) == len(
            record["choices"][0]["completion_token_ids"]
        )
    auto = await client.chat.completions.create(
        model=model, messages=ask, tools=[ADD], temperature=0, max_tokens=60
    )
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")
    schema = {"type": "object", "properties": {"fruit": {"enum": ["apple", "pear"]}}, "required": ["fruit"]}
    shaped = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Name a fruit as JSON."}],
        temperature=0,
        max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "fruit", "schema": schema}},
    )
    assert json.loads(shaped.choices[0].message.content or "")["fruit"] in ("apple", "pear")
    await client.close()


@pytest.mark.gpu
@pytest.mark.skipif(vllm_available() is not None, reason=f"vLLM engine: {vllm_available()}")
async def test_vllm_engine_serves_trains_and_hot_loads(tmp_path: Path) -> None:
    async with LocalBackend(
        run_dir=tmp_path / "run", extra_args=["--engine", "vllm", "--device", "cuda"]
    ) as backend:
        await _tools_and_constraints(backend)
        await _sample_train_serve(backend)
    # vLLM was started with the family's flags (the bundled template: hermes, no reasoning parser).
    log = (tmp_path / "run" / "server.log").read_text()
    assert "--chat-template" in log and "--tool-call-parser hermes" in log


@pytest.mark.skipif(
    importlib.util.find_spec("unsloth") is None,
    reason="unsloth not installed (pip install --no-deps unsloth==2026.10.9 unsloth_zoo==2026.10.9)",
)
async def test_unsloth_trainer_behind_the_server(tmp_path: Path) -> None:
    async with LocalBackend(run_dir=tmp_path / "run", extra_args=["--trainer", "unsloth"]) as backend:
        await _sample_train_serve(backend)
        log = (tmp_path / "run" / "server.log").read_text()
        assert "unsloth" in log.lower()
