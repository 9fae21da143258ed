"""With Langfuse configured, each held-out evaluation of train_loop is a Langfuse experiment run.

The dataset ``project/model`` holds the validation scenarios (upserted once, a rerun adds nothing);
each evaluated checkpoint is run ``model@step`` whose items are the held-out rollouts' own traces. The
server is the Langfuse API stand-in (tests/helpers/langfuse_api.py, answers parsed by the SDK's own
client; a real Langfuse needs Docker); the backend is the real app on the fake engine (``fake_backend``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from art_adapters import TrainableModel
from art_adapters._loop import train_loop
from art_adapters._scorers import verifiable_scorer
from art_adapters.observe import ObserveConfig, Observer
from art_adapters.observe._langfuse_datasets import dataset_item_id
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.langfuse_api import LangfuseApiStandIn
from tests.loop.test_loop import brevity, loop_config, make_rollout, scenarios

pytest.importorskip("langfuse")

ITEMS = "/api/public/dataset-items"


async def _train(
    model: TrainableModel, server: LangfuseApiStandIn, key: str, run_dir: Path, steps: int
) -> None:
    config = ObserveConfig(
        langfuse_public_key=key, langfuse_secret_key="sk-lf-exp", langfuse_base_url=server.url, run="exp"
    )
    observer = Observer(config)
    result = await train_loop(
        model, make_rollout(model), scenarios("t", 2), score=verifiable_scorer(brevity),
        val_scenarios=scenarios("v", 2), config=loop_config(run_dir, steps=steps, eval_every=0),
        observer=observer,
    )  # fmt: skip
    observer.shutdown()
    assert result.final_step == steps


async def test_each_held_out_evaluation_is_an_experiment_run_of_the_rollouts_traces(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = TrainableModel(name="loop-exp", project="loop-tests")
    await model.register(fake_backend)
    key = "pk-lf-loop-experiments"
    with LangfuseApiStandIn([], public_key=key, secret_key="sk-lf-exp") as server:
        await _train(model, server, key, tmp_path / "run", steps=2)
        name = "loop-tests/loop-exp"
        assert list(server.datasets) == [name]
        dataset_id = server.datasets[name]["id"]
        wanted = {dataset_item_id(name, f"v{i}"): f"v{i}" for i in range(2)}
        assert {i: item["metadata"]["scenario_id"] for i, item in server.dataset_items.items()} == wanted
        assert server.posts[ITEMS] == 2  # once per scenario across the two evaluations
        runs = server.experiment_runs()
        assert set(runs) == {"loop-exp@0", "loop-exp@2"}
        spans = {s["span_id"]: s for s in server.otlp_spans}
        for run, items in runs.items():
            # the held-out rollouts of that checkpoint: 2 scenarios x 2 rollouts, each its own trace
            held_out = {
                (s["trace_id"], s["span_id"]) for s in server.otlp_spans
                if s["name"].startswith("rollout ") and s["attributes"].get("art_adapters.split") == "val"
                and s["attributes"].get("art_adapters.policy.version") == run
            }  # fmt: skip
            assert len(held_out) == 4
            assert {(i["trace_id"], i["span_id"]) for i in items} == held_out
            assert len({i["experiment_id"] for i in items}) == 1
            for item in items:
                assert item["dataset_id"] == dataset_id and item["root_observation_id"] == item["span_id"]
                scenario = spans[item["span_id"]]["attributes"]["art_adapters.scenario.id"]
                assert wanted[item["item_id"]] == scenario
                # the scores are on the same trace (the SDK's score client)
                scores = {s["name"] for s in server.created_scores if s["traceId"] == item["trace_id"]}
                assert "reward" in scores
        assert runs["loop-exp@0"][0]["experiment_id"] != runs["loop-exp@2"][0]["experiment_id"]

        # a rerun (a new process's client: its own observer) upserts the same items, adds none
        await _train(model, server, key, tmp_path / "run", steps=2)
        assert list(server.datasets) == [name] and set(server.dataset_items) == set(wanted)
        assert len(server.experiment_runs()["loop-exp@2"]) == 8  # the same run, two evaluations of it


async def test_a_langfuse_that_fails_costs_one_warning_and_the_run_goes_on(
    fake_backend: FakeBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = TrainableModel(name="loop-exp-down", project="loop-tests")
    await model.register(fake_backend)
    key = "pk-lf-loop-experiments-down"
    with LangfuseApiStandIn([], public_key=key, secret_key="sk-lf-exp") as server:
        server.fail_datasets = 500
        with caplog.at_level(logging.WARNING, logger="art_adapters"):
            await _train(model, server, key, tmp_path / "run", steps=1)
        assert server.experiment_runs() == {} and server.dataset_items == {}
        rollouts = [s for s in server.otlp_spans if s["name"].startswith("rollout ")]
        assert rollouts and server.created_scores  # traces and scores still went out
    warnings = [r for r in caplog.records if "Langfuse dataset" in r.getMessage()]
    assert len(warnings) == 2, [r.getMessage() for r in warnings]  # one per evaluation (steps 0 and 1)
    assert "500" in warnings[0].getMessage() and "loop-exp-down@0" in warnings[0].getMessage()
