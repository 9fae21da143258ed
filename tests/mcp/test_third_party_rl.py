"""MCP-RL against third-party MCP servers from the registries, not only our own.

The servers are the registries' own, started for real (``tests.helpers.third_party``): ``mcp-server-time``
(PyPI, Python, stdio), ``@modelcontextprotocol/server-memory`` (npm, Node, stdio, its memory
file copied per rollout) and ``@modelcontextprotocol/server-everything`` (npm, Node,
streamable HTTP). On them: a captured rollout whose first call is forced; ``generate_scenarios``
with a scripted generator; and ``art-adapters train-mcp --steps 1`` end to end with the scripted RULER
judge. The servers are the subject, not the model: the backend is the real app on the fake engine and
trainer (``fake_backend``), whose forced calls are valid calls of each tool's schema.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import art_adapters as aa
import mcp_tools
from art_adapters.apps._train_mcp import build_agent, make_rollout, select_tools
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.judge_server import JudgeServer  # the RULER tests' scripted judge
from tests.helpers.scripted_generator import ScriptedGenerator
from tests.helpers.third_party import everything_http, node_server, python_server


@pytest.fixture
def everything_url() -> Iterator[str]:
    with everything_http() as url:
        yield url


def time_command() -> list[str]:
    return python_server("mcp_server_time", "--local-timezone", "UTC")


# --- a captured rollout with a forced first call, on the real backend --------------------------------


async def _forced_rollouts(
    backend: aa.Backend, server: Any, name: str, choice: str, task: str, offer: list[str] | None = None
) -> list[aa.Trajectory]:
    """Two rollouts of the bundled model offered *server*'s *offer* tools, the first turn forced to *choice*.

    A few tools keep the prompt short: on CPU every tool description costs prefill time.
    """
    tools = select_tools(await mcp_tools.load_tools(server, name=name), offer)
    model = aa.TrainableModel(name="third-party-forced", project="mcp-tests")
    await model.register(backend)
    agent = build_agent(
        model.chat_model(temperature=0.7, max_tokens=48), tools, max_turns=2, first_tool_choice=choice
    )
    groups = await aa.run_groups(
        make_rollout(agent), [{"task": task, "difficulty": 1}], n=2, max_failures=0, progress=False
    )
    return groups[0].trajectories


async def _assert_captured(
    backend: aa.Backend, trajectory: aa.Trajectory, server: str, tool: str, max_tokens: int
) -> aa.ToolCallRecord | None:
    """The first assistant turn called *tool* of *server*; its MCP record and exact tokens were captured.

    ``None`` for a rollout whose forced call was cut at the token limit before it closed (a sampled
    argument rambled on): then it is that call's opening, and no tool ran.
    """
    completion_ids = {m.completion_id for m in trajectory.messages if m.role == "assistant"}
    assert None not in completion_ids, trajectory.messages
    for completion_id in completion_ids:  # every model turn has its exact-token record on the backend
        token_record = await backend.get_token_record(completion_id)
        assert token_record["prompt_token_ids"] and token_record["choices"][0]["completion_token_ids"]
    first = next(m for m in trajectory.messages if m.role == "assistant")
    if not first.tool_calls:
        assert first.usage and first.usage["completion_tokens"] == max_tokens, first
        assert str(first.content).startswith(f'<tool_call>\n{{"name": "{tool}"'), first
        assert not trajectory.tool_records
        return None
    assert [c.function.name for c in first.tool_calls] == [tool], first
    record = trajectory.tool_records[0]
    assert (record.name, record.call_id) == (tool, first.tool_calls[0].id), record
    assert (record.source, record.server) == ("mcp", server), record
    assert record.session_id and record.session_id in trajectory.metadata["mcp_sessions"]
    # the server's own answer: a result, or its error text (never a capture failure with neither)
    assert (record.result if not record.is_error else record.result or record.error), record
    return record


def _check_time_record(record: aa.ToolCallRecord) -> None:
    """mcp-server-time's own answer to get_current_time, or its own error for a timezone it does not know."""
    assert record.session_id.startswith("local-")  # stdio: a session id of our own per rollout
    if record.is_error:
        assert "timezone" in (record.result or record.error or "").lower(), record
    else:
        answer = json.loads(record.result)
        assert answer["timezone"] == record.arguments["timezone"] and "datetime" in answer, record


def _check_memory_record(record: aa.ToolCallRecord) -> None:
    """server-memory's graph as its rollout's copy of the memory file holds it: the seeded entity."""
    assert not record.is_error, record
    assert [e["name"] for e in json.loads(record.result)["entities"]] == ["Ada"]


async def test_a_forced_first_call_on_a_node_server_over_streamable_http(
    fake_backend: FakeBackend, everything_url: str
) -> None:
    """server-everything over HTTP: the echo comes back from the server, under its own Mcp-Session-Id."""
    trajectories = await _forced_rollouts(
        fake_backend, everything_url, "everything", "echo", "Say hello back to me.",
        offer=["echo", "get-sum"],
    )
    records = [await _assert_captured(fake_backend, t, "everything", "echo", 48) for t in trajectories]
    ran = [r for r in records if r is not None]
    assert ran, "no forced call completed within the token limit"
    for record in ran:
        assert not record.session_id.startswith("local-")  # the server's own Mcp-Session-Id
        if not record.is_error:
            assert record.result == f"Echo: {record.arguments['message']}", record
    assert len({r.session_id for r in ran}) == len(ran)  # one session per rollout


# --- generate_scenarios with a scripted generator ---------------------------------------------------


def answer(*items: tuple[str, int]) -> str:
    return json.dumps({"scenarios": [{"task": task, "difficulty": level} for task, level in items]})


async def test_generate_scenarios_for_a_python_server_over_stdio(tmp_path: Path) -> None:
    tools = await mcp_tools.load_tools(time_command(), name="time")
    kept = [("What time is it in Tokyo right now?", 1), ("It is 9:30 in Berlin; what time is it in Lima?", 2)]
    generator = ScriptedGenerator(
        script=[
            answer(kept[0], ("Use get current time for Europe/Paris please", 1)),  # names get_current_time
            answer(("Please run convertTime from UTC 12:00 to Asia/Tokyo", 2), kept[1]),  # camelCase
        ]
    )
    save_to = tmp_path / "scenarios.jsonl"
    scenarios = await mcp_tools.generate_scenarios(tools, n=2, model=generator, batch_size=2, save_to=save_to)
    assert [(s.task, s.difficulty) for s in scenarios] == kept
    assert mcp_tools.load_scenarios(save_to) == scenarios
    assert "- get_current_time(timezone: string):" in generator.prompts[0]  # the server's own schema
    convert = "- convert_time(source_timezone: string, time: string, target_timezone: string):"
    assert convert in generator.prompts[0]
    # the second call was told which task was rejected and why
    assert "Use get current time for Europe/Paris please (names a tool)" in generator.prompts[1]


async def test_generate_scenarios_for_a_node_server_over_http_lists_its_tools_itself(
    everything_url: str, tmp_path: Path
) -> None:
    """Given the server's URL, generate_scenarios lists server-everything's (hyphenated) tools itself."""
    kept = [("Add 17 and 25 and tell me the total.", 1), ("Repeat the phrase 'good morning' back to me.", 1)]
    generator = ScriptedGenerator(
        script=[
            answer(("Call get-sum with 2 and 3 and report it", 1), ("Please getSum of 40 and 2 for me", 1)),
            answer(kept[0], ("Turn on toggleSimulatedLogging now", 2)),
            answer(kept[1]),
        ]
    )
    save_to = tmp_path / "scenarios.jsonl"
    scenarios = await mcp_tools.generate_scenarios(
        everything_url, n=2, model=generator, batch_size=2, save_to=save_to
    )
    assert [(s.task, s.difficulty) for s in scenarios] == kept and not generator.script
    assert mcp_tools.load_scenarios(save_to) == scenarios
    assert "- get-sum(a: number, b: number):" in generator.prompts[0]
    # each rejected task is shown to the next call with its reason: hyphenated and camelCase names count
    assert "Call get-sum with 2 and 3 and report it (names a tool)" in generator.prompts[1]
    assert "Please getSum of 40 and 2 for me (names a tool)" in generator.prompts[1]
    assert "Turn on toggleSimulatedLogging now (names a tool)" in generator.prompts[2]
    # a rerun with the same file finds them all saved and asks nothing
    again = await mcp_tools.generate_scenarios(
        everything_url, n=2, model=ScriptedGenerator(script=[]), save_to=save_to
    )
    assert again == scenarios


# --- train-mcp --steps 1 with the scripted judge -----------------------------------------------------


async def _train_mcp(
    backend: aa.Backend, server: list[str], tasks: list[str], tmp_path: Path, *extra: str
) -> tuple[int, str, Path]:
    """``art-adapters train-mcp SERVER --steps 1`` in its own process: (exit code, output, run dir)."""
    scenarios = mcp_tools.save_scenarios(
        [mcp_tools.Scenario(task=task, difficulty=1) for task in tasks], tmp_path / "in.jsonl"
    )
    run_dir = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "200", "ART_ADAPTERS_CACHE_DIR": str(tmp_path / "ruler-cache")}
    with JudgeServer() as judge:
        args = [
            "train-mcp", " ".join(server),
            "--scenarios", str(scenarios),
            "--run-dir", str(run_dir),
            "--backend-url", backend.base_url,
            "--judge-model", "scripted-judge",
            "--judge-base-url", judge.url,
            "--steps", "1",
            "--groups-per-step", "1",
            "--val-fraction", "0.5",
            "--rollouts-per-group", "2",
            "--max-turns", "2",
            "--max-tokens", "48",
            "--model-name", f"third-party-{tmp_path.name[-24:]}",
            *extra,
        ]  # fmt: skip
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "art_adapters.apps", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
        )  # fmt: skip
        output, _ = await process.communicate()
    return process.returncode or 0, " ".join(output.decode().split()), run_dir


async def _check_run(
    backend: aa.Backend, output: str, run_dir: Path, server: str, tool: str, max_tokens: int = 48
) -> list[aa.ToolCallRecord]:
    """One trained step, its tool-call rate in the console and metrics.jsonl; its rollouts captured the
    forced first call to *tool*, the server's answer and the exact tokens (checked on the backend).

    Returns the first tool records of the rollouts whose forced call ran (at least one does).
    """
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (train,) = [r for r in rows if r["split"] == "train"]
    rate = train["tool_call_rate"]
    assert train["step"] == 1 and rate > 0, train
    assert f"step 1: mean reward {train['reward_mean']:.3f}, tools called in {rate:.0%} of rollouts" in output
    assert ", trained" in output and "eval at step 0: mean reward" in output
    (batch,) = (run_dir / "batches").glob("*.scored.jsonl")  # the step's training group, as it was scored
    groups = [aa.TrajectoryGroup.model_validate_json(line) for line in batch.read_text().splitlines()]
    trajectories = [t for g in groups for t in g.trajectories]
    assert len(trajectories) == 2
    records = [await _assert_captured(backend, t, server, tool, max_tokens) for t in trajectories]
    ran = [r for r in records if r is not None]
    assert len(ran) / len(records) == rate  # the rate counts the rollouts whose forced call came out whole
    assert len({r.session_id for r in ran}) == len(ran)  # one session per rollout
    return ran


async def test_train_mcp_one_step_on_a_python_server_over_stdio(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    code, output, run_dir = await _train_mcp(
        fake_backend,
        time_command(),
        ["What time is it in Tokyo right now?", "What time is it in Lima now?"],
        tmp_path,
        "--first-tool-choice", "get_current_time",  # its one argument keeps the call short
    )  # fmt: skip
    assert code == 0, output
    # named after what the command runs (the module), as its tool records are; never after an option's value
    assert f"MCP server 'mcp_server_time' ({' '.join(time_command())}): 2 tools;" in output, output
    assert "offering get_current_time, convert_time; first turn tool_choice 'get_current_time'" in output
    for record in await _check_run(fake_backend, output, run_dir, "mcp_server_time", "get_current_time"):
        _check_time_record(record)


async def test_train_mcp_one_step_on_a_node_server_with_state(
    fake_backend: FakeBackend, memory_file: Path, tmp_path: Path
) -> None:
    original = memory_file.read_bytes()
    code, output, run_dir = await _train_mcp(
        fake_backend,
        node_server("mcp-server-memory"),
        ["Who is in my knowledge graph?", "What do you know about Ada?"],
        tmp_path,
        "--state", f"{memory_file}=MEMORY_FILE_PATH",
        "--tools", "create_entities", "--tools", "read_graph", "--tools", "search_nodes",
        "--first-tool-choice", "read_graph",
    )  # fmt: skip
    assert code == 0, output
    assert "MCP server 'mcp-server-memory' (" in output
    assert "9 tools; offering create_entities, read_graph, search_nodes (left out: " in output
    assert "per-rollout state isolation" not in output  # --state isolates it: no warning
    for record in await _check_run(fake_backend, output, run_dir, "mcp-server-memory", "read_graph"):
        _check_memory_record(record)
    assert memory_file.read_bytes() == original
    assert sorted(p.name for p in memory_file.parent.iterdir()) == ["memory.jsonl"]
