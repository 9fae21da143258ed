"""train-mcp on mcp-server-git with a per-rollout copy of a repository: ``--cwd {state:./repo}`` starts the
server inside the copy, ``--pin-arg repo_path=.`` makes the forced first call name it, so the calls the
bundled model makes run (before, 15 of 15 failed on a path the model could not know)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import art_adapters as aa
import mcp_tools
from art_adapters.apps._forced_call import parse_pins
from art_adapters.apps._train_mcp import CWD_HINT, TrainMcpConfig, _server, agent_prompt, build_agent, make_rollout
from tests.helpers.third_party import python_server


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository with one commit and one unstaged change."""
    path = tmp_path / "repo"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "README.md").write_text("hello\n")
    subprocess.run(["git", "-C", str(path), "add", "README.md"], check=True)
    subprocess.run(
        ["git", "-C", str(path), "-c", "user.name=Ada", "-c", "user.email=a@example.com", "commit", "-q", "-m", "first"],
        check=True,
    )
    (path / "README.md").write_text("hello\nmore\n")
    return path


def _config(repo: Path, **settings: object) -> TrainMcpConfig:
    command = python_server("mcp_server_git", "--repository", ".")
    return TrainMcpConfig(server=" ".join(command), cwd=f"{{state:{repo}}}", **settings)


async def test_cwd_starts_the_server_in_the_rollouts_copy_and_dot_is_that_copy(repo: Path) -> None:
    config = _config(repo, pin_arg=["repo_path=."])
    tools = {t.name: t for t in await mcp_tools.load_tools(_server(config))}
    assert parse_pins(config.pin_arg, list(tools.values())) == {"repo_path": "."}
    async with mcp_tools.rollout():
        status = await tools["git_status"].ainvoke({"repo_path": "."})
        refused = await tools["git_status"].ainvoke({"repo_path": str(repo)})
    assert "Changes not staged for commit" in status and "README.md" in status
    assert "outside the allowed repository" in refused  # the real repository is out of reach
    assert agent_prompt(config).endswith(CWD_HINT)  # the default prompt tells the model to pass '.'
    assert not agent_prompt(config.model_copy(update={"cwd": None})).endswith(CWD_HINT)
    with pytest.raises(aa.ConfigError, match="no offered tool has a parameter 'repo'"):
        parse_pins(["repo=."], list(tools.values()))
    with pytest.raises(aa.ConfigError, match="is not NAME=VALUE"):
        parse_pins(["repo_path"], list(tools.values()))


@pytest.mark.slow
async def test_the_bundled_models_forced_git_calls_run_in_the_copy(local_backend: aa.LocalBackend, repo: Path) -> None:
    """The greedy bundled model's forced first call names the copy ('.', pinned) and runs there; train-mcp's
    own token limit (128) leaves room for the call (at 48 a sampled argument could cut it)."""
    config = _config(repo, pin_arg=["repo_path=."])
    tools = await mcp_tools.load_tools(_server(config))
    model = aa.TrainableModel(name="git-cwd", project="mcp-tests")
    await model.register(local_backend)
    agent = build_agent(
        model.chat_model(temperature=0.0, max_tokens=config.max_tokens),
        tools,
        system_prompt=agent_prompt(config),
        max_turns=2,
        first_tool_choice="required",
        max_arg_chars=config.max_arg_chars,
        max_arg_items=config.max_arg_items,
        pins=parse_pins(config.pin_arg, tools),
    )
    trajectory = await make_rollout(agent)(mcp_tools.Scenario(task="What is the status of the repository?", difficulty=1))
    assert trajectory.metrics["first_turn_cut"] == 0.0, trajectory.messages
    first = trajectory.tool_records[0]
    assert first.arguments["repo_path"] == ".", first  # type: ignore[index]
    assert not (first.is_error and "repository" in str(first.result)), first  # never a path failure
    log = subprocess.run(["git", "-C", str(repo), "log", "--oneline"], capture_output=True, text=True, check=True)
    assert log.stdout.count("\n") == 1  # the real repository kept its one commit
