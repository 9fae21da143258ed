"""The other engine and trainer behind the same server: ``serve --engine vllm`` and ``--trainer unsloth``.

Each runs where its dependency imports (vLLM: installed and a CUDA GPU; Unsloth: installed, on
CPU too) and is skipped with the reason elsewhere. Both go through the real HTTP API: sample,
train one step, and the new checkpoint answers as ``name@1``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from pathlib import Path

import pytest
from art_adapters_backend.engine.vllm_engine import vllm_available
from sampled_groups import group_from_choices

from art_adapters import LocalBackend, TrainableModel, TrainConfig
from art_adapters.trajectory import Message

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


@pytest.mark.skipif(vllm_available() is not None, reason=f"vLLM engine: {vllm_available()}")
async def test_vllm_engine_serves_trains_and_hot_loads(tmp_path: Path) -> None:
    async with LocalBackend(
        run_dir=tmp_path / "run", extra_args=["--engine", "vllm", "--device", "cuda"]
    ) as backend:
        await _sample_train_serve(backend)


@pytest.mark.skipif(
    importlib.util.find_spec("unsloth") is None,
    reason="unsloth not installed (pip install --no-deps unsloth==2026.10.9 unsloth_zoo==2026.10.9)",
)
async def test_unsloth_trainer_behind_the_server(tmp_path: Path) -> None:
    async with LocalBackend(run_dir=tmp_path / "run", extra_args=["--trainer", "unsloth"]) as backend:
        await _sample_train_serve(backend)
        log = (tmp_path / "run" / "server.log").read_text()
        assert "unsloth" in log.lower()


async def test_vllm_engine_reads_documented_completion_shapes_without_vllm() -> None:
    """The response parsing of the thin vLLM path (token ids, EOS, log-probs), on the documented shapes."""
    from art_adapters_backend.engine.base import Constraint, GenerationRequest, SamplingParams
    from art_adapters_backend.engine.vllm_engine import VllmEngine

    engine = VllmEngine(Path("."), None, None, "http://127.0.0.1:9", context_length=64, eos_token_ids={2})
    params = SamplingParams(temperature=0.7, max_tokens=8)
    with_ids = {"index": 0, "text": "Hi", "finish_reason": "stop", "token_ids": [5, 6, 2],
                "logprobs": {"tokens": ["token_id:5", "token_id:6", "token_id:2"],
                             "token_logprobs": [-0.1, -0.2, -0.3]}}  # fmt: skip
    seq = engine._sequence(0, with_ids, params)
    assert seq.token_ids == [5, 6, 2] and seq.eos and seq.text_token_ids == [5, 6]
    assert seq.logprobs == [-0.1, -0.2, -0.3] and seq.finish_reason == "stop"
    older = {"index": 1, "text": "Hi", "finish_reason": "length",
             "logprobs": {"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-0.1, -0.2]}}  # fmt: skip
    seq = engine._sequence(1, older, params)
    assert seq.token_ids == [5, 6] and not seq.eos and seq.finish_reason == "length"
    body = engine._body(GenerationRequest([1, 2, 3], params, n=2, adapter="m@1"))
    assert body["model"] == "m@1" and body["prompt"] == [1, 2, 3] and body["logprobs"] == 0
    with pytest.raises(ValueError, match="forced tool calls"):
        engine._body(
            GenerationRequest([1], params, constraint=Constraint({"type": "object"}, prefix="<tool_call>\n"))
        )
    with pytest.raises(ValueError, match="context length"):
        engine._body(GenerationRequest(list(range(60)), params))
    await engine.close()
