"""Calibration: RULER against the verifiable reward, as numbers and in every train step's row.

The math is checked against published and hand-worked values and against the tie-free Spearman
formula; the loop test runs ``train_loop`` on the backend app (fake engine and trainer) with
``combined_scorer`` over a real scripted judge on 127.0.0.1, and finds the agreement in the metrics
file, the log and the train-step traces.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest
from langchain_openai import ChatOpenAI

from art_adapters import TrainableModel, Trajectory, TrajectoryGroup
from art_adapters._calibration import (
    Agreement,
    calibrate,
    dimensions_of,
    pairwise_agreement,
    ranks,
    spearman,
)
from art_adapters._loop import train_loop
from art_adapters._scorers import combined_scorer
from art_adapters.observe._metrics import MetricsHistory
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.judge_server import JudgeServer
from tests.helpers.observers import in_memory_observer
from tests.helpers.scripted_judges import LENGTH_RULE, judge_by, judge_dimensions, length_loving
from tests.loop.test_loop import brevity, loop_config, make_rollout, scenarios


def test_ties_share_their_mean_rank() -> None:
    assert ranks([0.2, 0.9, 0.2]) == [1.5, 3.0, 1.5]
    assert ranks([3, 1, 2, 2, 2]) == [5.0, 1.0, 3.0, 3.0, 3.0]


def test_spearman_matches_published_and_tie_free_values() -> None:
    # scipy.stats.spearmanr's documented example (one tie in y)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.8207826816681233, abs=1e-15)
    rng = random.Random(7)
    for _ in range(20):  # without ties: rho = 1 - 6 sum d^2 / (n (n^2 - 1))
        n = rng.randint(2, 9)
        xs, ys = rng.sample(range(100), n), rng.sample(range(100), n)
        d2 = sum((a - b) ** 2 for a, b in zip(ranks(xs), ranks(ys), strict=True))
        assert spearman(xs, ys) == pytest.approx(1 - 6 * d2 / (n * (n * n - 1)))
    assert spearman([1, 2, 3], [3, 2, 1]) == -1.0


def test_spearman_is_undefined_without_an_order() -> None:
    assert spearman([1.0], [2.0]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None  # constant reward: nothing to agree with
    assert spearman([1, 2, 3], [0.5, 0.5, 0.5]) is None
    with pytest.raises(ValueError, match="paired"):
        spearman([1, 2], [1, 2, 3])


def test_pairwise_agreement_leaves_out_reference_ties_and_counts_judge_ties_half() -> None:
    scores = [0.9, 0.5, 0.9, 0.1]
    reference = [1.0, 0.0, 0.5, 0.5]
    # (0,1): 1>0 and .9>.5 agree; (0,2): 1>.5, judge tie -> .5; (0,3): 1>.5, .9>.1 agree;
    # (1,2): 0<.5, .5<.9 agree; (1,3): 0<.5 but .5>.1 reversed; (2,3): reference tie, left out
    assert pairwise_agreement(scores, reference) == (3.5, 5)
    assert pairwise_agreement([1, 1], [1, 1]) == (0.0, 0)


def _group(ruler: list[float], reference: list[float | None], **dims: list[float]) -> TrajectoryGroup:
    trajectories = []
    for i, (score, ref) in enumerate(zip(ruler, reference, strict=True)):
        metrics: dict[str, float] = {"ruler_score": score, **{f"ruler_{d}": v[i] for d, v in dims.items()}}
        if ref is not None:
            metrics["independent_reward"] = ref
        trajectories.append(Trajectory(reward=score, metrics=metrics))
    return TrajectoryGroup(trajectories=trajectories)


def test_calibration_is_taken_within_groups_then_combined() -> None:
    # Each group is ordered exactly as its reference, but pooled across groups the order breaks:
    # RULER's scores compare rollouts of one scenario only.
    a = _group([0.1, 0.2, 0.3], [1, 2, 3], correctness=[0.3, 0.2, 0.1])
    b = _group([0.7, 0.8, 0.9], [-3, -2, -1], correctness=[0.1, 0.5, 0.9])
    lone = _group([0.5], [1.0])  # one trajectory: no pair
    missing = _group([0.1, 0.9], [None, None])  # no verifiable reward
    cal = calibrate([a, b, lone, missing])
    assert cal is not None
    assert cal.overall == Agreement(spearman=1.0, pairwise=1.0, pairs=6, groups=2)
    assert (cal.groups, cal.trajectories) == (2, 6)
    # correctness: reversed in a (-1), right in b (+1): mean 0, half the pairs agree
    assert cal.dimensions["correctness"] == Agreement(spearman=0.0, pairwise=0.5, pairs=6, groups=2)
    assert dimensions_of(t for g in (a, b) for t in g.trajectories) == ["correctness"]
    assert cal.row() == {
        "calibration_pairs": 6, "calibration_groups": 2, "calibration_spearman": 1.0,
        "calibration_pairwise": 1.0, "calibration_spearman_correctness": 0.0,
        "calibration_pairwise_correctness": 0.5,
    }  # fmt: skip
    assert "Spearman 1.00, pairwise agreement 100% over 6 pairs in 2 groups" in cal.summary()
    assert calibrate([lone, missing]) is None


@pytest.mark.parametrize(
    ("rule", "rho", "pairwise"),
    [
        (lambda body, text: 1.0 / (1.0 + len(text.strip())), 1.0, 1.0),  # agrees with brevity
        (None, -1.0, 0.0),  # length_loving: the opposite order
    ],
    ids=["brevity-judge", "length-judge"],
)
async def test_every_step_reports_ruler_against_the_verifiable_reward(
    fake_backend: FakeBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture, rule: object, rho: float,
    pairwise: float,
) -> None:
    model = TrainableModel(name=f"calibrated-{int(rho)}", project="loop-tests")
    await model.register(fake_backend)
    observer, exporter = in_memory_observer("calibrated")
    with JudgeServer() as server:
        server.reset(default=length_loving if rule is None else judge_by(rule))  # type: ignore[arg-type]
        judge = ChatOpenAI(base_url=server.url, api_key="t", model="scripted", max_retries=0, temperature=0)
        score = combined_scorer(judge, brevity, weight=1.0, cache=False, max_retries=0)
        with caplog.at_level(logging.INFO, logger="art_adapters._loop"):
            result = await train_loop(
                model, make_rollout(model), scenarios("c", 4), score=score, val_scenarios=scenarios("cv", 2),
                config=loop_config(tmp_path, steps=2, eval_every=0), observer=observer,
            )  # fmt: skip
    observer.force_flush(10)
    assert result.stopped is None and result.final_step == 2
    rows = MetricsHistory(tmp_path).rows()
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 2
    for row in train:
        assert row["calibration_spearman"] == pytest.approx(rho)
        assert row["calibration_pairwise"] == pytest.approx(pairwise)
        assert row["calibration_pairs"] > 0 and row["calibration_groups"] >= 1
    # the held-out rows too (two rollouts per scenario, where they differ in length)
    val = [r for r in rows if r["split"] == "val" and "calibration_spearman" in r]
    assert val and all(r["calibration_spearman"] == pytest.approx(rho) for r in val)
    logged = [r.getMessage() for r in caplog.records if "RULER vs the verifiable reward" in r.getMessage()]
    assert any(f"(train): RULER vs the verifiable reward: Spearman {rho:.2f}" in line for line in logged)
    steps = [s for s in exporter.get_finished_spans() if s.name.startswith("train_step")]
    assert len(steps) == 2
    for span in steps:
        assert (span.attributes or {})["art_adapters.train.calibration_spearman"] == pytest.approx(rho)


async def test_each_rubric_dimension_is_calibrated_in_the_rows(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = TrainableModel(name="calibrated-dims", project="loop-tests")
    await model.register(fake_backend)
    rules = {"brevity": lambda body, text: 1.0 / (1.0 + len(text.strip())), "length": LENGTH_RULE}
    with JudgeServer() as server:
        server.reset(default=judge_dimensions(rules))  # type: ignore[arg-type]
        judge = ChatOpenAI(base_url=server.url, api_key="t", model="dims", max_retries=0, temperature=0)
        score = combined_scorer(
            judge, brevity, weight=1.0, cache=False, max_retries=0, dimensions={"brevity": 1, "length": 1}
        )
        result = await train_loop(
            model, make_rollout(model), scenarios("d", 4), score=score,
            config=loop_config(tmp_path, steps=1, eval_every=0),
        )  # fmt: skip
    assert result.final_step == 1
    (row,) = MetricsHistory(tmp_path).rows("train")
    assert row["calibration_spearman_brevity"] == pytest.approx(1.0)
    assert row["calibration_pairwise_brevity"] == pytest.approx(1.0)
    assert row["calibration_spearman_length"] == pytest.approx(-1.0)
    assert row["calibration_pairwise_length"] == pytest.approx(0.0)
