"""Export over HTTP on the real backend: one real GRPO step on the bundled model, then
``await model.export(...)`` (adapter and merged) through ``POST /art/models/{name}/export``. The
exports reloaded with plain transformers/PEFT give the log-probabilities the backend served for the
same prompt and completion (its exact-token record: top-20 per position) within 1e-4; bad input
is a clear 4xx.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from art_adapters import BackendRequestError, LocalBackend, TrainableModel, TrainConfig
from art_adapters._errors import ConfigError
from tests.helpers.models import registered, unique_name
from tests.helpers.sampled_groups import sampled_group

PROMPT = "Name a colour."
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
async def trained(local_backend: LocalBackend) -> TrainableModel:
    """A model with one real training step (step 1) on the shared backend."""
    model = await registered(local_backend, unique_name("export"), "export-tests")
    rewards = [1.0, 0.0, 0.5, 0.0]
    group = await sampled_group(model, 4, lambda c: rewards[c.index], prompt=PROMPT, seed=1)
    # A large learning rate, so the adapter moves the logits far more than the tolerance.
    result = await model.train([group], config=TrainConfig(learning_rate=2e-3))
    assert result.trained and result.step == 1
    return model


@pytest.fixture(scope="module")
async def served(trained: TrainableModel, local_backend: LocalBackend) -> dict[str, Any]:
    """What the backend served for ``name@1``: prompt + completion ids and top-20 logprobs per token."""
    client = trained.openai_client()
    reply = await client.chat.completions.create(
        model=trained.served_name(1), messages=[{"role": "user", "content": "Say something nice."}],
        max_tokens=4, temperature=1.0, seed=0, logprobs=True, top_logprobs=20,
    )  # fmt: skip
    await client.close()
    record = await local_backend.get_token_record(reply.id)
    assert record["step"] == 1
    [choice] = record["choices"]
    return {"prompt": record["prompt_token_ids"], **choice}


def _logprobs(model: Any, served: dict[str, Any]) -> torch.Tensor:
    """log_softmax of ``model``'s logits at each completion position, [len(completion), V]."""
    ids = torch.tensor([served["prompt"] + served["completion_token_ids"]])
    with torch.no_grad():
        logits = model.eval()(input_ids=ids).logits[0]
    start = len(served["prompt"]) - 1
    return torch.log_softmax(logits[start : start + len(served["completion_token_ids"])].float(), dim=-1)


def _max_diff_to_served(logprobs: torch.Tensor, served: dict[str, Any]) -> float:
    """The largest gap between ``logprobs`` and every logprob the backend reported (sampled + top-20)."""
    diffs = []
    sampled = zip(served["completion_token_ids"], served["logprobs"], strict=True)
    for i, (token, logprob) in enumerate(sampled):
        diffs.append(abs(logprobs[i, token].item() - logprob))
        diffs += [abs(logprobs[i, alt].item() - lp) for alt, lp in served["top_logprobs"][i]]
    return max(diffs)


@pytest.mark.slow
async def test_exports_reload_with_the_backends_logprobs(
    trained: TrainableModel, served: dict[str, Any], tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter = await trained.export(tmp_path / "adapter")  # latest: step 1
    assert adapter == tmp_path / "adapter" and (adapter / "adapter_model.safetensors").is_file()
    manifest = json.loads((adapter / "export.json").read_text())
    assert manifest["step"] == 1 and manifest["tool_call_parser"] == "hermes"
    command = manifest["vllm_command"]
    assert command[command.index("--lora-modules") + 1] == f"{trained.name}={adapter}"
    assert Path(command[command.index("--chat-template") + 1]).is_file()
    assert " ".join(command) in (adapter / "README.md").read_text().replace("'", "")

    base_path = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), str(adapter))
    via_peft = _logprobs(peft_model, served)
    diff = _max_diff_to_served(via_peft, served)
    with peft_model.disable_adapter():
        base_diff = _max_diff_to_served(_logprobs(peft_model, served), served)
    print(f"bundled adapter export vs backend: max |logprob diff| {diff:.2e} (base weights: {base_diff:.2e})")
    assert diff < TOLERANCE
    assert base_diff > 100 * TOLERANCE  # the trained adapter matters, so the check above can fail
    del peft_model

    merged = await trained.export(tmp_path / "merged", step=1, merged=True)
    via_merged = _logprobs(AutoModelForCausalLM.from_pretrained(str(merged)), served)
    merged_diff = _max_diff_to_served(via_merged, served)
    full_diff = (via_merged - via_peft).abs().max().item()
    print(f"bundled merged export vs backend: {merged_diff:.2e}; vs adapter, all tokens: {full_diff:.2e}")
    assert merged_diff < TOLERANCE and full_diff < TOLERANCE


@pytest.mark.slow
async def test_export_errors_are_clear(
    trained: TrainableModel, local_backend: LocalBackend, tmp_path: Path
) -> None:
    with pytest.raises(BackendRequestError, match="has no step 5") as missing_step:
        await trained.export(tmp_path / "a", step=5)
    assert missing_step.value.status_code == 404
    with pytest.raises(BackendRequestError, match="base weights.*--merged") as base:
        await trained.export(tmp_path / "a", step=0)
    assert base.value.status_code == 400
    with pytest.raises(BackendRequestError, match="'never-registered' is not registered") as unknown:
        await local_backend.export_model("never-registered", out=str(tmp_path / "a"))
    assert unknown.value.status_code == 404
    with pytest.raises(BackendRequestError, match="absolute path") as relative:
        await local_backend.export_model(trained.name, out="relative/out")
    assert relative.value.status_code == 400
    with pytest.raises(ConfigError, match="step must be >= 0"):
        await trained.export(tmp_path / "a", step=-1)

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(BackendRequestError, match="not empty") as taken:
        await trained.export(tmp_path / "taken")
    assert taken.value.status_code == 409 and (tmp_path / "taken" / "notes.txt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # nothing written on any refusal


@pytest.mark.slow
async def test_deleting_a_step_waits_for_its_export(
    trained: TrainableModel, local_backend: LocalBackend, tmp_path: Path
) -> None:
    """``checkpoints/delete`` of a step being exported waits for the export instead of breaking it."""
    group = await sampled_group(trained, 2, lambda c: float(c.index), prompt=PROMPT, seed=2)
    result = await trained.train([group], config=TrainConfig(learning_rate=1e-4))
    assert result.trained
    old_step = result.step - 1
    out = tmp_path / "merged"
    export = asyncio.create_task(trained.export(out, step=old_step, merged=True))
    while not any(tmp_path.glob(".tmp-merged-*")):  # the backend writes its temporary folder: it holds the lease
        assert not export.done(), export
        await asyncio.sleep(0.01)
    deleted = await local_backend.request("POST", f"/art/models/{trained.name}/checkpoints/delete",
                                          json={"steps": [old_step]})  # fmt: skip
    answered = time.time()
    assert await export == out  # the export read a whole checkpoint: the delete did not pull it away
    manifest = json.loads((out / "export.json").read_text())
    # the delete answered only once the export had written everything (its manifest is written last)
    assert (out / "export.json").stat().st_mtime <= answered
    assert deleted == {"deleted": [old_step]} and manifest["step"] == old_step and manifest["merged"]
    assert (out / "model.safetensors").is_file() or any(out.glob("model*.safetensors"))
    info = await local_backend.get_model(trained.name)
    assert old_step not in info["steps"]
    with pytest.raises(BackendRequestError, match=f"has no step {old_step}"):
        await trained.export(tmp_path / "again", step=old_step)
