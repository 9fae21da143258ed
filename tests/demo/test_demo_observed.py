"""``art-adapters demo --steps 1`` and ``train-mcp`` (judged) observed with only environment variables set.

A real Arize Phoenix server receives the traces, once over plain OTLP (``OTEL_EXPORTER_OTLP_ENDPOINT``)
and once through the Langfuse SDK (``LANGFUSE_*`` with Phoenix as the base URL: a Langfuse server
needs Docker, which these machines lack). The test reads the spans back through Phoenix's REST API
and finds one trace per rollout carrying its RL attributes, its generations, its MCP tool calls and
its scores, and the train-step trace. The OTLP run also has W&B in offline mode and Trackio in
local mode, and the test reads their stores back with their own command-line tools. ``train-mcp``,
with the RULER tests' scripted judge, starts its own embedded backend and sends its traces over OTLP:
each training rollout's trace carries the judge's score with its explanation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_tools import Scenario, save_scenarios
from mcp_tools.servers import server_command
from tests.helpers.judge_server import JudgeServer
from tests.helpers.phoenix_fixture import started_phoenix
from tests.helpers.phoenix_server import PhoenixServer

BIN = Path(sys.executable).parent
ROLLOUTS = 3  # --groups 1 --rollouts 3: one training step's rollouts
EVALS = 2  # --eval-size 1 --eval-samples 1, before and after the step


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    yield from started_phoenix(tmp_path_factory)


def _env(tmp_path: Path, project: str, **extra: str) -> dict[str, str]:
    """The command's environment: none of the caller's trace, tracker or judge settings, Phoenix
    project ``project``, and ``extra``."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("LANGFUSE_", "OTEL_", "WANDB_", "TRACKIO_", "ART_ADAPTERS_TRACKERS"))
    }  # fmt: skip
    env.update(COLUMNS="160", ART_ADAPTERS_JUDGE_MODEL="", OPENAI_API_KEY="", HOME=str(tmp_path / "home"))
    env.setdefault("ART_ADAPTERS_TORCH_THREADS", "1")
    env["OTEL_RESOURCE_ATTRIBUTES"] = f"openinference.project.name={project}"
    env.update(extra)
    return env


def _demo(run_dir: Path, env: dict[str, str]) -> str:
    command = [
        sys.executable, "-m", "art_adapters.apps", "demo", "--run-dir", str(run_dir), "--steps", "1",
        "--groups", "1", "--rollouts", str(ROLLOUTS), "--eval-size", "1", "--eval-samples", "1",
        "--train-size", "2", "--question", "What is 20 + 22?",
        "--dynamic-sampling", "0", "--eval-temperature", "0",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=500, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _spans(server: PhoenixServer, project: str, **expected_roots: int) -> list[dict]:
    """The project's spans once at least ``expected_roots[split]`` rollout roots of each split arrived
    (at most 30 s). Counting every root together broke off too early when a batch scored alike and
    an extra training batch ran: the second evaluation's trace had not arrived yet."""
    deadline = time.monotonic() + 30
    spans: list[dict] = []
    while time.monotonic() < deadline:
        spans = server.spans(project)
        roots = [s["attributes"].get("art_adapters.split") for s in spans if s["name"].startswith("rollout ")]
        if all(roots.count(split) >= count for split, count in expected_roots.items()):
            break
        time.sleep(0.5)
    return spans


def _by_trace(spans: list[dict]) -> dict[str, list[dict]]:
    traces: dict[str, list[dict]] = {}
    for span in spans:
        traces.setdefault(span["context"]["trace_id"], []).append(span)
    return traces


def _check_traces(spans: list[dict]) -> None:
    traces = _by_trace(spans)
    roots = [s for s in spans if s["name"].startswith("rollout ")]
    assert len({r["context"]["trace_id"] for r in roots}) == len(roots)  # one trace per rollout
    splits = [(r["attributes"]["art_adapters.split"], r["attributes"]["art_adapters.step"]) for r in roots]
    assert sorted(s for s in splits if s[0] == "val") == [("val", 0), ("val", 1)]
    # step 0's rollouts: one group of ROLLOUTS, or more when a group all scored the same (not trained on)
    train = [s for s in splits if s[0] == "train"]
    assert set(train) == {("train", 0)} and len(train) % ROLLOUTS == 0, splits
    for root in roots:
        a = root["attributes"]
        assert root["parent_id"] is None
        step = a["art_adapters.step"]
        assert a["art_adapters.policy.version"] == f"demo-agent@{step}"
        assert a["art_adapters.scenario.id"] and a["art_adapters.group.id"].startswith("group")
        assert isinstance(a["art_adapters.rollout.index"], int)
        assert 0.0 <= a["art_adapters.reward"] <= 1.0  # scored before the span ended
        members = traces[root["context"]["trace_id"]]
        llm = [s for s in members if s["span_kind"] == "LLM"]
        assert llm and all(s["attributes"]["gen_ai.request.model"] == f"demo-agent@{step}" for s in llm)
        mcp = [s for s in members if s["attributes"].get("mcp.method.name") == "tools/call"]
        assert mcp, "the first turn must call a calculator tool"  # tool_choice="required"
        assert all(s["parent_id"] == root["context"]["span_id"] for s in llm + mcp)
        (score,) = [s for s in members if s["name"] == "score reward"]
        assert score["attributes"]["gen_ai.evaluation.score.value"] == a["art_adapters.reward"]
        assert score["parent_id"] == root["context"]["span_id"]
    train_steps = [s for s in spans if s["name"] == "train_step 1"]
    assert len(train_steps) == 1 and "art_adapters.train.loss" in train_steps[0]["attributes"]


@pytest.mark.slow
def test_demo_over_otlp_traces_every_rollout_and_tracks_each_step(
    phoenix: PhoenixServer, tmp_path: Path
) -> None:
    project = "demo-otlp"
    env = _env(
        tmp_path, project, OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.url,
        WANDB_MODE="offline", WANDB_SILENT="true", TRACKIO_DIR=str(tmp_path / "trackio"),
    )  # fmt: skip
    run_dir = tmp_path / "demo"
    out = _demo(run_dir, env)
    assert f"traces: OTLP endpoint {phoenix.url}/v1/traces" in out
    assert "this run: wandb: W&B (offline)" in out and "this run: trackio: Trackio (local" in out
    _check_traces(_spans(phoenix, project, train=ROLLOUTS, val=EVALS))

    # W&B's offline run holds the step's rows (read with W&B's own reader, as a user would).
    (sync_dir,) = (run_dir / "wandb").glob("offline-run-*")
    inspected = subprocess.run(
        [str(BIN / "wandb"), "leet", "inspect", "--json", str(sync_dir)],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    history = [json.loads(line) for line in inspected.stdout.splitlines() if line.strip()]
    rows = {h["history"]["step"]["num"]: h["history"]["item"] for h in history if h.get("type") == "history"}
    assert sorted(rows) == [0, 1]
    assert "val/reward_mean" in rows[0] and "train/reward_mean" in rows[1] and "train/loss" in rows[1]
    assert "val/reward_mean" in rows[1]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (train_row,) = [m for m in metrics if m["split"] == "train" and m["step"] == 1]  # the step that trained
    assert rows[1]["train/loss"] == pytest.approx(train_row["loss"])
    assert (tmp_path / "trackio" / "demo.db").is_file()


@pytest.mark.slow
def test_demo_through_the_langfuse_sdk_traces_every_rollout(phoenix: PhoenixServer, tmp_path: Path) -> None:
    project = "demo-langfuse"
    env = _env(
        tmp_path, project,
        LANGFUSE_PUBLIC_KEY="pk-lf-demo", LANGFUSE_SECRET_KEY="sk-lf-demo", LANGFUSE_BASE_URL=phoenix.url,
        LANGFUSE_OTEL_TRACES_EXPORT_PATH="v1/traces",
    )  # fmt: skip
    out = _demo(tmp_path / "demo", env)
    assert f"traces: Langfuse at {phoenix.url}" in out
    _check_traces(_spans(phoenix, project, train=ROLLOUTS, val=EVALS))


@pytest.mark.slow
def test_train_mcp_over_otlp_traces_every_rollout_with_the_judges_score(
    phoenix: PhoenixServer, tmp_path: Path
) -> None:
    project = "train-mcp-otlp"
    cache = str(tmp_path / "cache")
    env = _env(tmp_path, project, OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.url, ART_ADAPTERS_CACHE_DIR=cache)
    scenarios = save_scenarios(
        [Scenario(task="What is 17 + 25?", difficulty=1), Scenario(task="Add 120 and 33.", difficulty=1)],
        tmp_path / "scenarios.jsonl",
    )
    with JudgeServer() as judge:
        command = [
            sys.executable, "-m", "art_adapters.apps", "train-mcp", " ".join(server_command("calculator")),
            "--scenarios", str(scenarios), "--run-dir", str(tmp_path / "run"), "--steps", "1",
            "--groups-per-step", "1", "--val-fraction", "0.5", "--rollouts-per-group", "3",
            "--max-turns", "2", "--max-tokens", "96", "--model-name", "mcp-otlp",
            "--judge-model", "scripted-judge", "--judge-base-url", judge.url,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=500, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"traces: OTLP endpoint {phoenix.url}/v1/traces" in done.stdout
    spans = _spans(phoenix, project, train=3)
    traces = _by_trace(spans)
    roots = [s for s in spans if s["name"].startswith("rollout ")]
    train = [r for r in roots if r["attributes"]["art_adapters.split"] == "train"]
    assert len(train) == 3 and len({r["context"]["trace_id"] for r in roots}) == len(roots), roots
    for root in train:
        a = root["attributes"]
        assert a["art_adapters.policy.version"] == "mcp-otlp@0" and a["art_adapters.step"] == 0
        members = traces[root["context"]["trace_id"]]
        assert any(s["attributes"].get("mcp.method.name") == "tools/call" for s in members)
        (ruler,) = [s for s in members if s["name"] == "score ruler"]  # the judge's score, on this trace
        assert ruler["parent_id"] == root["context"]["span_id"]
        assert ruler["attributes"]["gen_ai.evaluation.explanation"].startswith("because ")
        assert ruler["attributes"]["art_adapters.judge.models"]
        assert 0.0 <= ruler["attributes"]["gen_ai.evaluation.score.value"] <= 1.0
        assert a["art_adapters.reward"] == pytest.approx(ruler["attributes"]["gen_ai.evaluation.score.value"])
