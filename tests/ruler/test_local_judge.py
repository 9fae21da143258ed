"""RULER with the real local judge: the bundled model through our backend's OpenAI API.

The 135M model is no good judge, so this checks the plumbing, not the verdicts: the
request is schema-constrained (``response_format`` json_schema), so the first answer is
valid JSON with the right ids and in-range scores; identical trajectories share a
score; the explanation respects the schema's bound; a re-score is served by the cache.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import art_adapters as aa
from tests.ruler.test_score import answer, make_group

pytestmark = pytest.mark.slow


async def test_local_model_judges_a_group_through_the_openai_api(
    local_backend: aa.LocalBackend, tmp_path: Path
) -> None:
    model = aa.TrainableModel(name="ruler-judge", project="ruler-tests")
    await model.register(local_backend)
    judge = model.chat_model(temperature=0, max_tokens=120)
    group = make_group(
        answer("The answer is 5.", tool=True),
        answer("The answer is 6."),
        answer("The answer is 5.", tool=True),
    )

    scored = await aa.ruler_score_group(
        group, judge=judge, cache=tmp_path, max_retries=0, max_explanation_chars=24, judge_timeout_s=240
    )

    info = scored.metadata["ruler"]
    assert info["status"] == "scored" and info["attempts"] == 1 and info["cache_hit"] is False
    assert info["judge"] == f"ChatOpenAI:ruler-judge@{local_backend.openai_base_url}"
    assert info["distinct_trajectories"] == 2
    rewards = scored.rewards
    assert all(r is not None and 0.0 <= r <= 1.0 for r in rewards)
    assert rewards[0] == rewards[2]  # identical trajectories, one entry, one score
    for trajectory in scored.trajectories:
        assert len(trajectory.metadata["ruler_explanation"]) <= 24
        assert trajectory.metrics["ruler_score"] == trajectory.reward

    start = time.monotonic()
    again = await aa.ruler_score_group(
        group, judge=judge, cache=tmp_path, max_retries=0, max_explanation_chars=24, judge_timeout_s=240
    )
    assert again.metadata["ruler"]["cache_hit"] is True
    assert again.rewards == rewards
    assert time.monotonic() - start < 2.0  # no generation happened
