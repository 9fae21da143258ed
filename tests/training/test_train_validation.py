"""Bad train data is a 400 at parse time, before anything is written: NaN/Infinity rewards and
metrics, non-finite config numbers, ``lora_target_modules`` the base model does not have."""

from __future__ import annotations

import json
import math
import uuid

import httpx
import pytest

from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered
from tests.helpers.sampled_groups import sampled_group


@pytest.mark.slow
async def test_non_finite_rewards_metrics_and_unknown_lora_targets_are_400_without_a_groups_file(
    fake_backend: FakeBackend,
) -> None:
    model = await registered(fake_backend, f"bad-data-{uuid.uuid4().hex[:6]}", "hardening")
    # two real completions of the server, rewarded 0 and 1 (a trainable group), as JSON
    sampled = await sampled_group(model, 2, lambda c: float(c.index), max_tokens=4, seed=1)
    group = sampled.model_dump(mode="json")
    groups_dir = fake_backend.run_dir / "models" / model.name / "groups"

    def with_reward(value: float) -> dict:
        bad = {**group, "trajectories": [dict(t) for t in group["trajectories"]]}
        bad["trajectories"][1]["reward"] = value
        return bad

    def with_metric(value: float) -> dict:
        bad = {**group, "trajectories": [dict(t) for t in group["trajectories"]]}
        bad["trajectories"][0]["metrics"] = {"tool_calls": 1, "judge_score": value}
        return bad

    cases = [
        ({"groups": [with_reward(math.nan)]}, "reward is nan"),
        ({"groups": [with_reward(math.inf)]}, "reward is inf"),
        ({"groups": [with_metric(-math.inf)]}, "metrics['judge_score'] is -inf"),
        ({"groups": [group], "config": {"lora_target_modules": ["q_proj", "qkv_proj"]}}, "qkv_proj"),
        ({"groups": [group], "config": {"learning_rate": math.inf}}, "learning_rate"),
    ]
    async with httpx.AsyncClient(base_url=fake_backend.base_url, timeout=120) as http:
        for body, needle in cases:
            # written with JSON's common NaN/Infinity extension, as json.dumps (and requests) do
            answer = await http.post(f"/art/models/{model.name}/train", content=json.dumps(body),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
            assert answer.status_code == 400, (needle, answer.status_code, answer.text)
            assert needle in answer.json()["error"]["message"], answer.text
            assert not groups_dir.exists() or not any(groups_dir.iterdir()), needle
        listed = (await http.post(f"/art/models/{model.name}/train",
                                  json={"groups": [group], "config": {"lora_target_modules": ["nope"]}})).json()
        assert "q_proj" in listed["error"]["message"]  # says which names the model has
        assert listed["error"]["param"] == "config.lora_target_modules"
    assert await model.get_step() == 0
