"""A captured LangGraph run trains one step on exact tokens, per model family; the step is served as
``name@1``; and (on Qwen3) its export reloads with plain transformers/PEFT giving the backend's
log-probabilities. The bundled model's export is checked the same way in ``tests/export``.

The graph is a real LangGraph ``StateGraph`` (agent node, ``ToolNode``, ``tools_condition``) whose
model is ``model.chat_model()``: the first turn is a forced ``add`` call (so the run has a tool
turn whatever the model is), the second an answer with tools turned off. Two runs with rewards
assigned by hand make one group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from art_adapters import TrainableModel
from art_adapters._trajectory import Trajectory
from tests.helpers.families_support import (
    Family,
    assert_served_at_step_1,
    assert_step_1_on_records,
    captured_add_run,
    family_model,
    forced_add_graph,
    train_rewarded,
)

#: Real model families only: ``llama3-json-flags`` is the Qwen3 model under another template.
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("family", ["qwen3", "smollm2"], indirect=True)]

TOLERANCE = 1e-4


async def _extends(family: Family, trajectory: Trajectory) -> bool:
    """Whether the answer turn's recorded prompt extends the call turn's prompt + completion."""
    call_turn, answer_turn = trajectory.messages[2], trajectory.messages[4]
    first = await family.backend.get_token_record(call_turn.completion_id or "")
    second = await family.backend.get_token_record(answer_turn.completion_id or "")
    sampled = (
        first["prompt_token_ids"] + first["choices"][call_turn.choice_index or 0]["completion_token_ids"]
    )
    return second["prompt_token_ids"][: len(sampled)] == sampled


@pytest.fixture(scope="session")
async def trained(family: Family) -> dict[str, Any]:
    """One training step of a fresh model on two captured graph runs of the family (step 1)."""
    model = await family_model(family, "fam")
    graph = forced_add_graph(model)
    runs = [await captured_add_run(graph) for _ in range(2)]
    extends = [await _extends(family, run) for run in runs]
    result = await train_rewarded(model, family, runs)
    return {"model": model, "runs": runs, "extends": extends, "result": result}


async def test_a_captured_graph_run_trains_one_step_on_exact_tokens(
    family: Family, trained: dict[str, Any]
) -> None:
    result, runs, extends = trained["result"], trained["runs"], trained["extends"]
    for run in runs:
        (call,) = run.messages[2].tool_calls
        assert call.function.name == "add" and set(json.loads(call.function.arguments)) == {"a", "b"}
        assert all(m.completion_id for m in run.messages if m.role == "assistant")
    if family.reasoning_parser == "qwen3":
        # Qwen3's template drops the call turn's (empty) thinking block when it renders the history,
        # so the answer turn's prompt does not extend what was sampled: one sequence per turn.
        assert extends == [False, False]
    assert_step_1_on_records(result, 4)
    metrics = result.metrics
    breaks = extends.count(False)
    print(f"{family.name}: {metrics['sequences']} sequences from 4 recorded turns, {breaks} prefix breaks")
    assert metrics["prefix_breaks"] == breaks and metrics["sequences"] == 2 + breaks, metrics
    assert metrics["grad_norm"] > 0


async def test_each_captured_turn_was_prompted_with_vllms_rendering_of_the_graphs_request(
    family: Family, trained: dict[str, Any]
) -> None:
    """End to end through LangChain: what the graph sent, rendered as vLLM would, is what the turn was sampled on."""
    for run in trained["runs"]:
        messages, tools = run.openai_messages(), [t.model_dump(exclude_none=True) for t in run.tools or []]
        for i, message in enumerate(run.messages):
            if message.role != "assistant":
                continue
            record = await family.backend.get_token_record(message.completion_id or "")
            assert record["prompt_token_ids"] == family.prompt_ids(
                {"messages": messages[:i], "tools": tools}
            ), i


async def test_the_step_is_served_as_name_at_1(family: Family, trained: dict[str, Any]) -> None:
    model: TrainableModel = trained["model"]
    await assert_served_at_step_1(family, model)


def _logprobs(model: Any, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log_softmax of ``model``'s logits at each completion position, [len(completion), V]."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model.eval()(input_ids=ids).logits[0]
    start = len(prompt) - 1
    return torch.log_softmax(logits[start : start + len(completion)].float(), dim=-1)


def _max_diff(logprobs: torch.Tensor, choice: dict[str, Any]) -> float:
    """The largest gap to every logprob the backend reported (sampled and top-20)."""
    diffs = []
    for i, (token, logprob) in enumerate(
        zip(choice["completion_token_ids"], choice["logprobs"], strict=True)
    ):
        diffs.append(abs(logprobs[i, token].item() - logprob))
        diffs += [abs(logprobs[i, alt].item() - lp) for alt, lp in choice["top_logprobs"][i]]
    return max(diffs)


async def test_the_export_reloads_with_the_backends_logprobs(
    family: Family, trained: dict[str, Any], tmp_path: Path
) -> None:
    if family.name != "qwen3":
        pytest.skip("the bundled model's export reload is tested in tests/export/test_export_api.py")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model: TrainableModel = trained["model"]
    client = model.openai_client()
    reply = await client.chat.completions.create(
        model=model.served_name(1),
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        max_tokens=6,
        temperature=1.0,
        seed=0,
        logprobs=True,
        top_logprobs=20,
    )
    await client.close()
    record = await family.backend.get_token_record(reply.id)
    assert record["step"] == 1
    (choice,) = record["choices"]
    prompt = record["prompt_token_ids"]

    adapter = await model.export(tmp_path / "adapter")
    manifest = json.loads((adapter / "export.json").read_text())
    assert (manifest["step"], manifest["tool_call_parser"], manifest["reasoning_parser"]) == (
        1,
        "hermes",
        "qwen3",
    )
    assert (adapter / manifest["chat_template_file"]).read_text(encoding="utf-8") == family.chat_template
    base_path = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), str(adapter))
    via_peft = _logprobs(peft_model, prompt, choice["completion_token_ids"])
    with peft_model.disable_adapter():
        base_diff = _max_diff(_logprobs(peft_model, prompt, choice["completion_token_ids"]), choice)
    diff = _max_diff(via_peft, choice)
    print(f"qwen3 adapter export vs backend: max |logprob diff| {diff:.2e} (base weights: {base_diff:.2e})")
    assert diff < TOLERANCE and base_diff > 100 * TOLERANCE  # the adapter matters, so the check can fail

    merged = await model.export(tmp_path / "merged", merged=True)
    via_merged = _logprobs(
        AutoModelForCausalLM.from_pretrained(str(merged)), prompt, choice["completion_token_ids"]
    )
    merged_diff = _max_diff(via_merged, choice)
    print(f"qwen3 merged export vs backend: max |logprob diff| {merged_diff:.2e}")
    assert merged_diff < TOLERANCE and (via_merged - via_peft).abs().max().item() < TOLERANCE
