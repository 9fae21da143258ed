"""``art-adapters import SOURCE OUT.jsonl``: files and Langfuse (API stand-in) to trajectories, scenarios.

The Phoenix source is tested beside the real Phoenix server, in test_import_phoenix_live.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from typer.testing import CliRunner

import art_adapters as aa
import mcp_tools
from art_adapters.apps._cli import app
from art_adapters.observe import OtlpJsonFileExporter
from tests.capture.test_langchain import QUESTION, planner_graph, summariser_policy
from tests.helpers.capture_fakes import PolicyChatModel, add, calculator_policy, multiply, react_agent
from tests.helpers.json_server import JsonServer, Request
from tests.helpers.langchain_instrumentations import instrumented_with
from tests.helpers.langfuse_api import LangfuseApiStandIn
from tests.helpers.phoenix_server import free_port
from tests.observe.test_import_langfuse_api import KEYS, TRACES
from tests.observe.test_observe_import_langfuse import langfuse_trace


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["import", *args])
    return result.exit_code, " ".join(result.output.split())  # rich wraps long lines


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


async def test_otlp_file_from_openinference_imports_with_scenarios_and_a_window(tmp_path: Path) -> None:
    spans = tmp_path / "collector.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileExporter(spans)))
    handler = aa.TrajectoryCallbackHandler()
    try:
        with instrumented_with("openinference", provider):
            graph = planner_graph(
                react_agent(PolicyChatModel(policy=calculator_policy), [add, multiply]),
                PolicyChatModel(policy=summariser_policy),
            )
            for question in (QUESTION, {"messages": [("user", "what is 5 + 1 times 6")]}):
                await graph.ainvoke(question, config={"callbacks": [handler]})
    finally:
        provider.shutdown()
    out = tmp_path / "out" / "prod.jsonl"
    code, output = run(str(spans), str(out))
    assert code == 0, output
    assert "2 trajectories (0 with a reward)" in output and "2 scenarios" in output
    imported = [aa.Trajectory.model_validate_json(line) for line in lines(out)]
    assert [t.messages for t in imported] == [t.messages for t in aa.trajectories_from_otlp_json(spans)]
    scenarios = mcp_tools.load_scenarios(out.with_name("prod.scenarios.jsonl"))
    assert [(s.task, s.difficulty) for s in scenarios] == [
        ("what is 2 + 3 times 4", 2),
        ("what is 5 + 1 times 6", 2),
    ]
    assert scenarios[0].metadata == {
        "source": str(spans),
        "trace_id": imported[0].metadata["trace_id"],
        "trajectory_id": imported[0].id,
    }
    # --since keeps the second run, --limit 1 the newest; --scenarios puts the file elsewhere
    since = imported[1].started_at.isoformat()
    code, output = run(
        str(spans), str(tmp_path / "late.jsonl"), "--since", since, "--scenarios", str(tmp_path / "s.jsonl")
    )
    assert code == 0 and "1 trajectories" in output
    assert [s.task for s in mcp_tools.load_scenarios(tmp_path / "s.jsonl")] == ["what is 5 + 1 times 6"]
    code, output = run(str(spans), str(tmp_path / "newest.jsonl"), "--limit", "1")
    assert (
        code == 0
        and aa.Trajectory.model_validate_json(lines(tmp_path / "newest.jsonl")[0]).messages
        == imported[1].messages
    )


def test_langfuse_export_file_counts_what_the_scenarios_leave_out(tmp_path: Path) -> None:
    again = langfuse_trace("1" * 32)  # the same task a second time
    silent = copy.deepcopy(langfuse_trace("2" * 32))  # the user's message never reached a model
    for observation in silent["observations"]:
        if observation["type"] == "GENERATION":
            observation["input"] = [{"role": "system", "content": "You are a calculator."}]
    export = tmp_path / "langfuse-export.json"
    export.write_text(json.dumps([langfuse_trace(), again, silent]))
    code, output = run(str(export), str(tmp_path / "lf.jsonl"))
    assert code == 0, output
    assert "3 trajectories (3 with a reward)" in output
    assert "1 scenarios" in output and "left out: 1 no user message, 1 duplicate" in output
    (scenario,) = mcp_tools.load_scenarios(tmp_path / "lf.scenarios.jsonl")
    assert scenario.task == "what is 2 + 3" and scenario.metadata["reward"] == 0.75
    assert scenario.metadata["trace_id"] == "5f1b2c3d4e5f60718293a4b5c6d7e8f9" and scenario.difficulty == 1


def test_langfuse_source_with_tag_session_and_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", KEYS["public_key"])
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", KEYS["secret_key"])
    out = tmp_path / "lf.jsonl"
    with LangfuseApiStandIn(TRACES) as server:
        code, output = run(
            f"langfuse:{server.url}", str(out), "--tag", "prod", "--tag", "calc", "--session", "s1",
            "--since", "2026-11-20T09:59:00", "--until", "2026-11-20T11:30:00+00:00",
        )  # fmt: skip
        roots = server.calls("/api/public/v2/observations")[0]
    assert code == 0, output
    assert "2 trajectories (2 with a reward)" in output and "left out: 1 duplicate" in output
    assert (
        '"value": ["prod", "calc"]' in roots["filter"][0] and '"2026-11-20T09:59:00Z"' in roots["filter"][0]
    )
    assert [aa.Trajectory.model_validate_json(line).reward for line in lines(out)] == [0.25, 0.5]
    (scenario,) = mcp_tools.load_scenarios(tmp_path / "lf.scenarios.jsonl")
    assert (
        scenario.metadata["trace_id"] == "a" * 32 and scenario.metadata["source"] == f"langfuse:{server.url}"
    )


def test_errors_unreachable_bad_credentials_empty_and_misused_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    dead = f"http://127.0.0.1:{free_port()}"
    code, output = run(f"phoenix:{dead}", str(out))
    assert code == 2 and f"cannot reach Phoenix at {dead}/v1/projects/default/spans" in output
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", KEYS["public_key"])
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong")
    with LangfuseApiStandIn(TRACES) as server:
        code, output = run(f"langfuse:{server.url}", str(out))
        assert code == 2 and "refused the credentials (401)" in output
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", KEYS["secret_key"])
        monkeypatch.setenv("LANGFUSE_BASE_URL", server.url)
        code, output = run("langfuse", str(out), "--tag", "nobody-uses-this")
        assert code == 1 and "no traces found in langfuse for this selection: nothing written" in output
    assert not out.exists() and not (tmp_path / "out.scenarios.jsonl").exists()
    cases: list[tuple[list[str], str]] = [
        ([f"phoenix:{dead}", "--tag", "prod"], "--tag and --session select Langfuse traces"),
        ([dead], "phoenix:http"),
        ([str(tmp_path / "missing.json")], "no such file"),
        (["langfuse", "--project", "p"], "--project names a Phoenix project"),
        ([str(tmp_path / "missing.json"), "--project", "p"], "--project names a Phoenix project"),
        ([f"phoenix:{dead}", "--since", "yesterday"], "--since must be an ISO 8601 time"),
    ]
    for args, message in cases:
        code, output = run(args[0], str(out), *args[1:])
        assert code == 2 and message in output, (args, output)
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", dead)  # a bare "phoenix" reads it
    code, output = run("phoenix", str(out))
    assert code == 2 and f"cannot reach Phoenix at {dead}/v1/projects/default/spans" in output
    (tmp_path / "other.json").write_text('{"hello": "world"}')
    code, output = run(str(tmp_path / "other.json"), str(out))
    assert code == 2 and "neither OTLP JSON" in output


def _bearer_only(request: Request) -> tuple[int, dict[str, Any]]:
    """An empty Phoenix span page to ``Authorization: Bearer phx-key``, 401 to anything else."""
    if request.headers.get("authorization") == "Bearer phx-key":
        return 200, {"data": [], "next_cursor": None}
    return 401, {"detail": "Invalid token"}


def test_phoenix_api_key_is_sent_as_a_bearer_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PHOENIX_API_KEY goes out as the bearer token (a stand-in: the test Phoenix runs without auth)."""
    with JsonServer(_bearer_only) as server:
        monkeypatch.setenv("PHOENIX_API_KEY", "wrong")
        code, output = run(f"phoenix:{server.url}", str(tmp_path / "out.jsonl"))
        assert code == 2 and "refused the credentials (401): check PHOENIX_API_KEY" in output
        monkeypatch.setenv("PHOENIX_API_KEY", "phx-key")
        code, output = run(f"phoenix:{server.url}", str(tmp_path / "out.jsonl"))
        assert code == 1 and "no traces found" in output  # accepted, and nothing there
    assert [r.headers.get("authorization") for r in server.requests] == ["Bearer wrong", "Bearer phx-key"]


def test_help_documents_the_sources() -> None:
    result = CliRunner().invoke(app, ["import", "--help"])
    text: Any = " ".join(result.output.split())
    assert result.exit_code == 0
    for piece in (
        "phoenix:URL",
        "langfuse:URL",
        "PHOENIX_API_KEY",
        "LANGFUSE_PUBLIC_KEY",
        "--tag",
        "--scenarios",
    ):
        assert piece in text


def test_a_langfuse_server_without_observations_v2_needs_the_legacy_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", KEYS["public_key"])
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", KEYS["secret_key"])
    out = tmp_path / "lf.jsonl"
    with LangfuseApiStandIn(TRACES, legacy=True) as server:
        refused, message = run(f"langfuse:{server.url}", str(out), "--tag", "prod")
        assert not out.exists()
        code, output = run(f"langfuse:{server.url}", str(out), "--tag", "prod", "--langfuse-legacy-traces-api")
    assert refused == 2 and "--langfuse-legacy-traces-api" in message
    assert code == 0 and "trajectories" in output and lines(out)
    misused, why = run(str(tmp_path / "x.jsonl"), str(out), "--langfuse-legacy-traces-api")
    assert misused == 2 and "use it with a langfuse source" in why
