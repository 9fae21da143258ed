"""Per-rollout state isolation (``mcp_tools._isolation``) on real file-backed third-party servers.

The servers are the registries' own: ``@modelcontextprotocol/server-memory`` (Node, a
knowledge graph in the JSONL file named by ``MEMORY_FILE_PATH``) and ``mcp-server-git``
(Python, a repository named by ``--repository``), started over stdio, no mocks.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest

import mcp_tools
from art_adapters._errors import ConfigError
from mcp_tools._config import parse_servers, parse_state_option
from tests.helpers.third_party import node_server, python_server


def memory_server(memory_file: Path) -> mcp_tools.StdioServer:
    return mcp_tools.StdioServer(
        command=node_server("mcp-server-memory")[0],
        state=[mcp_tools.StateCopy(source=memory_file, env="MEMORY_FILE_PATH")],
    )


def by_name(tools: list) -> dict:
    return {t.name: t for t in tools}


async def test_two_rollouts_of_the_memory_server_do_not_see_each_others_writes(memory_file: Path) -> None:
    original = memory_file.read_bytes()
    tools = by_name(await mcp_tools.load_tools(memory_server(memory_file), name="memory"))

    async with mcp_tools.rollout() as first:
        await tools["create_entities"].ainvoke(
            {"entities": [{"name": "Grace", "entityType": "person", "observations": ["found a moth"]}]}
        )
        graph = json.loads(await tools["read_graph"].ainvoke({}))
        folders = first.sessions[0].state_folders
        assert {e["name"] for e in graph["entities"]} == {"Ada", "Grace"}
        copy = next(folders["memory"].rglob("memory.jsonl"))
        assert "Grace" in copy.read_text(encoding="utf-8")  # the write went to this rollout's copy
    assert not folders["memory"].exists()  # deleted when the rollout ended

    async with mcp_tools.rollout():
        graph = json.loads(await tools["read_graph"].ainvoke({}))
        assert {e["name"] for e in graph["entities"]} == {"Ada"}  # the seed, not rollout 1's entity

    assert memory_file.read_bytes() == original
    assert sorted(p.name for p in memory_file.parent.iterdir()) == ["memory.jsonl"]  # no temp files beside it


async def test_concurrent_rollouts_each_get_their_own_copy(memory_file: Path) -> None:
    import asyncio

    original = memory_file.read_bytes()
    tools = by_name(await mcp_tools.load_tools(memory_server(memory_file), name="memory"))

    async def one(name: str) -> set[str]:
        async with mcp_tools.rollout():
            await tools["create_entities"].ainvoke(
                {"entities": [{"name": name, "entityType": "person", "observations": []}]}
            )
            await asyncio.sleep(0.2)  # both are writing at once
            return {e["name"] for e in json.loads(await tools["read_graph"].ainvoke({}))["entities"]}

    seen = await asyncio.gather(one("Grace"), one("Linus"))
    assert seen == [{"Ada", "Grace"}, {"Ada", "Linus"}]
    assert memory_file.read_bytes() == original


async def test_state_dir_keeps_each_sessions_copies_for_debugging(memory_file: Path, tmp_path: Path) -> None:
    keep = tmp_path / "kept"
    tools = by_name(await mcp_tools.load_tools(memory_server(memory_file), name="memory", state_dir=keep))
    async with mcp_tools.rollout():
        await tools["create_entities"].ainvoke(
            {"entities": [{"name": "Grace", "entityType": "person", "observations": []}]}
        )
    copies = [p for p in keep.rglob("memory.jsonl") if "Grace" in p.read_text(encoding="utf-8")]
    assert len(copies) == 1 and copies[0].parent.parent.name.startswith("mcp-state-memory-")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository with one commit."""
    path = tmp_path / "repo"
    path.mkdir()
    env = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(path), "add", "README.md"], check=True)
    subprocess.run(["git", "-C", str(path), *env, "commit", "-q", "-m", "first"], check=True)
    return path


def git_state(repo: Path) -> tuple[str, str]:
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    return head.stdout.strip(), status.stdout


async def test_a_rollout_commits_in_its_own_copy_of_a_repository(repo: Path) -> None:
    """The git server runs inside its copy (cwd placeholder): tools say repo_path='.', not the real path."""
    before = git_state(repo)
    command = python_server("mcp_server_git", "--repository", ".")
    server = mcp_tools.StdioServer(command=command[0], args=command[1:], cwd=f"{{state:{repo}}}")
    tools = by_name(await mcp_tools.load_tools(server, name="git"))

    async with mcp_tools.rollout() as scope:
        await tools["git_status"].ainvoke({"repo_path": "."})  # opens this rollout's session and copy
        copy = next(scope.sessions[0].state_folders["git"].glob("*/repo"))
        (copy / "notes.txt").write_text("from rollout 1\n")  # what a file-writing tool would do
        await tools["git_add"].ainvoke({"repo_path": ".", "files": ["notes.txt"]})
        result = await tools["git_commit"].ainvoke({"repo_path": ".", "message": "rollout 1"})
        assert "Changes committed" in result, result
        assert "rollout 1" in await tools["git_log"].ainvoke({"repo_path": "."})
        refused = await tools["git_log"].ainvoke({"repo_path": str(repo)})
        assert "outside the allowed repository" in refused  # the real repository is out of reach

    async with mcp_tools.rollout():
        log = await tools["git_log"].ainvoke({"repo_path": "."})
        assert "first" in log and "rollout 1" not in log

    assert git_state(repo) == before  # the real repository is untouched
    assert not (repo / "notes.txt").exists()


async def test_write_tools_without_isolation_warn(
    memory_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    command = node_server("mcp-server-memory")
    with caplog.at_level(logging.WARNING, logger="mcp_tools"):
        await mcp_tools.load_tools(
            mcp_tools.StdioServer(command=command[0], env={"MEMORY_FILE_PATH": str(memory_file)}),
            name="memory",
        )
    warnings = [r.getMessage() for r in caplog.records if "per-rollout state isolation" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert "'memory'" in warnings[0] and "create_entities" in warnings[0] and "delete_entities" in warnings[0]
    assert "read_graph" not in warnings[0]  # annotated read-only
    assert "StateCopy" in warnings[0] and "--state" in warnings[0]  # says how to fix it

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mcp_tools"):
        await mcp_tools.load_tools(memory_server(memory_file), name="memory")
        async with mcp_tools.McpSession(memory_server(memory_file), name="memory") as session:
            await session.load_tools()
    assert "per-rollout state isolation" not in caplog.text


async def test_read_only_server_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mcp_tools"):
        tools = await mcp_tools.load_tools(python_server("mcp_server_time"))
    assert {t.name for t in tools} >= {"get_current_time", "convert_time"}
    assert "per-rollout state isolation" not in caplog.text


def test_state_option_forms(memory_file: Path) -> None:
    assert parse_state_option(f"{memory_file}=MEMORY_FILE_PATH").env == "MEMORY_FILE_PATH"
    assert parse_state_option(f"{memory_file.parent}=--repository").arg == "--repository"
    with pytest.raises(ConfigError, match="SOURCE=ENV"):
        parse_state_option(str(memory_file))
    with pytest.raises(ConfigError, match="does not exist"):
        parse_state_option("/no/such/file.json=MEMORY_FILE_PATH")
    with pytest.raises(ConfigError, match="does not exist"):  # the placeholder is checked when parsed
        parse_servers("node server.js --db {state:/no/such/db.sqlite}")
    spec = mcp_tools.with_state(["node", "server.js"], [f"{memory_file}=MEMORY_FILE_PATH"])
    assert spec.isolated and spec.state[0].source == memory_file


def test_http_servers_cannot_take_state(memory_file: Path) -> None:
    with pytest.raises(ConfigError, match="stdio servers only"):
        mcp_tools.with_state("http://127.0.0.1:9/mcp", [f"{memory_file}=MEMORY_FILE_PATH"])
    with pytest.raises(ConfigError, match="stdio servers only"):
        mcp_tools.McpSession({"url": "http://127.0.0.1:9/mcp", "state": [{"source": str(memory_file)}]})


def memory_policy(messages: list) -> Any:
    """Create an entity named after the task's last word, then read the graph, then stop."""
    from langchain_core.messages import AIMessage

    name = next(m for m in messages if m.type == "human").content.split()[-1]
    turn = sum(1 for m in messages if m.type == "ai")
    if turn == 0:
        entity = {"name": name, "entityType": "person", "observations": []}
        call = {"name": "create_entities", "args": {"entities": [entity]}, "id": f"c-{name}"}
        return AIMessage(content="", tool_calls=[call])
    if turn == 1:
        return AIMessage(content="", tool_calls=[{"name": "read_graph", "args": {}, "id": f"r-{name}"}])
    return AIMessage(content="done")


async def test_train_mcp_state_option_isolates_its_rollouts(memory_file: Path) -> None:
    """train-mcp's wiring: ``--state`` turns the server into an isolated one, and its rollouts stay apart."""
    import art_adapters as aa
    from art_adapters.apps._train_mcp import TrainMcpConfig, _server, build_agent, make_rollout
    from tests.helpers.capture_fakes import PolicyChatModel

    original = memory_file.read_bytes()
    config = TrainMcpConfig(
        server=node_server("mcp-server-memory")[0], state=[f"{memory_file}=MEMORY_FILE_PATH"]
    )
    tools = await mcp_tools.load_tools(_server(config), name="memory")
    agent = build_agent(PolicyChatModel(policy=memory_policy), tools, max_turns=3)
    scenarios = [mcp_tools.Scenario(task=f"Remember {who}", difficulty=1) for who in ("Grace", "Linus")]
    groups = await aa.run_groups(make_rollout(agent), scenarios, n=2, max_failures=0, progress=False)
    for group, who in zip(groups, ("Grace", "Linus"), strict=True):
        for trajectory in group.trajectories:
            graph = json.loads(trajectory.tool_records[1].result)
            assert {e["name"] for e in graph["entities"]} == {"Ada", who}
    assert memory_file.read_bytes() == original


def test_train_mcp_rejects_state_for_an_http_server(memory_file: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from art_adapters.apps._cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["train-mcp", "--help"])
    assert result.exit_code == 0 and "--state" in result.output
    result = runner.invoke(
        app,
        [
            "train-mcp",
            "http://127.0.0.1:9/mcp",
            "--state",
            f"{memory_file}=MEMORY_FILE_PATH",
            "--run-dir",
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 2 and "stdio servers only" in " ".join(result.output.split())
