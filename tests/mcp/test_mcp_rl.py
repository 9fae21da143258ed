"""MCP-RL pieces without the model: the ReAct agent, per-rollout MCP sessions (state isolation over stdio
AND HTTP through run_groups), the judge choice and the train-mcp command's failure paths."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from langchain_core.messages import AIMessage, BaseMessage
from typer.testing import CliRunner

import art_adapters as aa
import mcp_tools
from art_adapters.apps._cli import TRAIN_MCP_OPTIONS, app
from art_adapters.apps._options import build_config
from art_adapters.apps._train_mcp import (
    GENERATOR_TEMPERATURE,
    ToolTally,
    TrainMcpConfig,
    TrainMcpResult,
    _rollouts,
    _with_temperature,
    build_agent,
    make_rollout,
    report,
    resolve_judge_model,
    select_tools,
    usage_snippet,
)
from mcp_tools import Scenario
from mcp_tools.servers import server_command
from tests.helpers.capture_fakes import PolicyChatModel
from tests.helpers.fake_backend import FakeBackend


def notes_policy(messages: list[BaseMessage]) -> AIMessage:
    """Create a note titled after the task's last word, then list the notes, then stop."""
    title = next(m for m in messages if m.type == "human").content.split()[-1]
    turn = sum(1 for m in messages if m.type == "ai")
    if turn == 0:
        args = {"title": title, "body": f"private to {title}"}
        return AIMessage(content="", tool_calls=[{"name": "create_note", "args": args, "id": f"c-{title}"}])
    if turn == 1:
        return AIMessage(
            content="", tool_calls=[{"name": "list_notes", "args": {"limit": 50}, "id": f"l-{title}"}]
        )
    return AIMessage(content="done")


def endless_policy(messages: list[BaseMessage]) -> AIMessage:
    """Always asks for another tool call."""
    turn = sum(1 for m in messages if m.type == "ai")
    return AIMessage(content="", tool_calls=[{"name": "list_notes", "args": {}, "id": f"l-{turn}"}])


SCENARIOS = [Scenario(task=f"Please write down note {t}", difficulty=1) for t in ("alpha", "beta")]


async def _check_isolation(server: object) -> None:
    tools = await mcp_tools.load_tools(server, name="notes")
    agent = build_agent(PolicyChatModel(policy=notes_policy), tools, max_turns=4)
    groups = await aa.run_groups(make_rollout(agent), SCENARIOS, n=3, max_failures=0, progress=False)
    sessions: set[str] = set()
    for group, scenario in zip(groups, SCENARIOS, strict=True):
        title = scenario.task.split()[-1]
        assert len(group.trajectories) == 3
        for trajectory in group.trajectories:
            create, listing = trajectory.tool_records
            assert create.result == "created note #13"  # every rollout starts from the seed's 12 notes
            lines = listing.result.splitlines()
            assert len(lines) == 13 and lines[0].startswith(f"#13 {title}")  # its own note, nobody else's
            assert create.session_id == listing.session_id  # one session for the whole rollout
            assert trajectory.metadata["task"] == scenario.task and trajectory.metadata["difficulty"] == 1
            assert trajectory.metadata["mcp_sessions"] == [create.session_id]
            sessions.add(create.session_id)
    assert len(sessions) == 6  # a fresh session per rollout


async def test_rollouts_get_fresh_isolated_sessions_over_stdio() -> None:
    await _check_isolation(server_command("notes"))


async def test_rollouts_get_fresh_isolated_sessions_over_http(notes_url: str) -> None:
    await _check_isolation(notes_url)


async def test_the_agent_stops_after_max_turns() -> None:
    tools = await mcp_tools.load_tools(server_command("notes"))
    model = PolicyChatModel(policy=endless_policy)
    trajectory = await make_rollout(build_agent(model, tools, max_turns=3))(
        {"task": SCENARIOS[0].task, "difficulty": 2}  # a plain dict works too
    )
    assert trajectory.metadata["difficulty"] == 2
    assert model.calls == 3
    assert len(trajectory.tool_records) == 2  # the third turn's calls are not run
    with pytest.raises(aa.ConfigError, match="max_turns"):
        build_agent(model, tools, max_turns=0)


async def test_the_evaluation_samples_at_its_own_temperature() -> None:
    """Training rollouts at ``temperature``, the held-out ones at ``eval_temperature`` (sampled at 1.0 by
    default: the greedy model's calls hid the sampled policy's tool errors)."""
    tools = await mcp_tools.load_tools(server_command("notes"))
    asked: list[float] = []

    def agent_at(temperature: float) -> object:
        asked.append(temperature)
        return build_agent(PolicyChatModel(policy=endless_policy), tools, max_turns=1)

    for settings, expected in (({}, [1.0, 1.0]), ({"eval_temperature": 0.0}, [1.0, 0.0])):
        asked.clear()
        config = TrainMcpConfig(server="x", **settings)
        _rollouts(config, None, None, ToolTally(), agent_at, None)  # type: ignore[arg-type]
        assert asked == expected
    with pytest.raises(ValueError, match="eval_temperature"):
        TrainMcpConfig(server="x", eval_temperature=-1)


def test_the_judge_comes_from_flags_then_env_then_the_local_model(monkeypatch: pytest.MonkeyPatch) -> None:
    local = PolicyChatModel(policy=endless_policy)
    for name in ("ART_ADAPTERS_JUDGE_MODEL", "ART_ADAPTERS_JUDGE_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    config = TrainMcpConfig(server="x")
    judge, line = resolve_judge_model(config, lambda: local)
    assert judge is local and "base model" in line
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the one rule of judge_from_env, as the demo reads it
    judge, line = resolve_judge_model(config, lambda: local)
    assert judge.model_name == "gpt-4o-mini"
    assert line == "judge: gpt-4o-mini at the OpenAI API ($OPENAI_API_KEY)"
    monkeypatch.setenv("ART_ADAPTERS_JUDGE_MODEL", "env-judge")
    judge, line = resolve_judge_model(config, lambda: local)
    assert judge.model_name == "env-judge" and "$ART_ADAPTERS_JUDGE_MODEL" in line
    flagged = TrainMcpConfig(server="x", judge_model="flag-judge", judge_base_url="http://127.0.0.1:9/v1")
    judge, line = resolve_judge_model(flagged, lambda: local)
    assert judge.model_name == "flag-judge" and "(--judge-model)" in line
    assert judge.temperature == 0.0  # judging is greedy...
    writer = _with_temperature(judge, GENERATOR_TEMPERATURE)
    assert (
        writer.temperature == GENERATOR_TEMPERATURE and judge.temperature == 0.0
    )  # ...writing scenarios is not
    assert _with_temperature(local, 0.5) is local  # a model without a temperature field is used as it is
    with pytest.raises(ValueError, match="judge_base_url needs judge_model"):
        TrainMcpConfig(server="x", judge_base_url="http://127.0.0.1:9/v1")


def test_train_mcp_holds_a_loop_config_and_its_flags_come_from_the_models(tmp_path: Path) -> None:
    config = TrainMcpConfig(server="x", run_dir=tmp_path, seed=3)
    loop = config.loop
    assert (loop.steps, loop.groups_per_step, loop.rollouts_per_group, loop.eval_every) == (4, 2, 4, 4)
    assert loop.eval_rollouts == 4 and config.eval_temperature == 1.0  # a sampled held-out evaluation
    assert loop.train.learning_rate == 1e-3 and loop.run == aa.RunConfig(timeout_s=600, max_failure_rate=0.25)
    assert loop.run_dir == tmp_path and loop.seed == 3  # the run's, unless the loop sets its own
    own = TrainMcpConfig(server="x", loop=aa.LoopConfig(steps=1, seed=9, run_dir=tmp_path / "metrics"))
    assert own.loop.seed == 9 and own.loop.run_dir == tmp_path / "metrics" and own.loop.groups_per_step == 4
    with pytest.raises(ValueError, match=r"steps moved into TrainMcpConfig.loop: pass loop=LoopConf"):
        TrainMcpConfig(server="x", steps=2)
    with pytest.raises(ValueError, match=r"rollout_timeout_s moved .*=LoopConfig\(run=RunConfig\(timeout_s"):
        TrainMcpConfig(server="x", rollout_timeout_s=5)
    # the command line: each option's default and help are the model's; loop flags merge into the default loop
    params = {p.name: p for p in typer.main.get_command(app).commands["train-mcp"].params}
    assert params["steps"].default == 4 and params["learning_rate"].default == 1e-3
    assert params["n_scenarios"].default == TrainMcpConfig.model_fields["n_scenarios"].default
    assert params["val_fraction"].help == TrainMcpConfig.model_fields["val_fraction"].description
    assert params["learning_rate"].help == "AdamW step size for the LoRA weights: the peak of lr_schedule."  # TrainConfig's own words
    assert params["steps"].help.startswith("Train until the model is at this step")  # LoopConfig's
    options = {"server": "x", "steps": 7, "learning_rate": 1e-3, "seed": 5, "tools": None}
    options |= {"eval_rollouts": 3, "eval_temperature": 0.0}
    config = build_config(TrainMcpConfig, options, TRAIN_MCP_OPTIONS)
    assert config.loop.steps == 7 and config.loop.train.learning_rate == 1e-3
    assert config.loop.eval_rollouts == 1 and config.eval_temperature == 0.0  # greedy: one rollout is enough
    options["eval_temperature"] = 0.7
    config = build_config(TrainMcpConfig, options, TRAIN_MCP_OPTIONS)
    assert config.loop.eval_rollouts == 3 and config.eval_temperature == 0.7  # a sampled held-out evaluation
    assert config.loop.groups_per_step == 2  # the rest of the loop is train-mcp's default
    assert config.loop.seed == 5 and config.tools is None and config.loop.run_dir == config.run_dir


def test_train_mcp_help_and_bad_inputs_fail_fast(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["train-mcp", "--help"])
    assert result.exit_code == 0 and "--scenarios" in result.output and "--judge-model" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "Find my Lisbon hotel", "difficulty": 7}\n', encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "train-mcp",
            " ".join(server_command("notes")),
            "--scenarios",
            str(bad),
            "--run-dir",
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 2
    # rich wraps long lines anywhere, even inside the path: compare with every whitespace removed
    assert f"{bad}:1:difficulty" in "".join(result.output.split())
    result = runner.invoke(
        app, ["train-mcp", "python -m no_such_module_here", "--run-dir", str(tmp_path / "run")]
    )
    assert result.exit_code == 2 and "could not start MCP server" in " ".join(result.output.split())
    result = runner.invoke(app, ["train-mcp", "x", "--rollouts-per-group", "1"])
    assert result.exit_code == 2 and "rollouts_per_group" in result.output


async def test_a_forced_first_turn_makes_the_model_call_a_tool(fake_backend: FakeBackend) -> None:
    """With ``first_tool_choice`` the model calls a tool in every rollout (the bundled model never does
    unprompted); a named tool is the one called; only the first turn is forced. The agent's forcing is the
    subject, so the backend is the real app on the fake engine (the real model's forced calls are covered
    end to end by tests/capture/test_end_to_end.py and test_train_mcp.py)."""
    tools = await mcp_tools.load_tools(server_command("calculator"))
    model = aa.TrainableModel(name="forced-first", project="mcp-tests")
    await model.register(fake_backend)
    chat = model.chat_model(temperature=1.0, max_tokens=48)
    scenario = {"task": "What is 17 + 25?", "difficulty": 1}
    for choice, expected in (("required", {t.name for t in tools}), ("multiply", {"multiply"})):
        agent = build_agent(chat, tools, max_turns=2, first_tool_choice=choice)
        groups = await aa.run_groups(make_rollout(agent), [scenario], n=3, max_failures=0, progress=False)
        for trajectory in groups[0].trajectories:
            first = next(m for m in trajectory.messages if m.role == "assistant")
            assert first.tool_calls and {c.function.name for c in first.tool_calls} <= expected, first
            assert trajectory.tool_records and trajectory.tool_records[0].name in expected
    with pytest.raises(aa.ConfigError, match="'nope' is not 'auto', 'required' or one of the tools"):
        build_agent(chat, tools, first_tool_choice="nope")


async def test_select_tools_filters_in_the_servers_order_and_names_unknown_tools() -> None:
    tools = await mcp_tools.load_tools(server_command("calculator"))
    assert [t.name for t in select_tools(tools, ["sqrt", "add"])] == ["add", "sqrt"]
    assert [t.name for t in select_tools(tools, None, ["sqrt", "power"])] == [
        "add", "subtract", "multiply", "divide"
    ]
    with pytest.raises(aa.ConfigError, match="no tool named 'plus'.*its tools are: add, subtract"):
        select_tools(tools, ["plus"])
    with pytest.raises(aa.ConfigError, match="leave no tool"):
        select_tools(tools, ["add"], ["add"])


@pytest.mark.parametrize("owned", [True, False])
def test_the_printed_snippet_is_never_wrapped_and_parses(owned: bool, tmp_path: Path) -> None:
    """On a narrow terminal the snippet's long lines stay whole, and the printed lines are valid Python;
    a loop that gave up says so last."""
    import ast
    import io
    import textwrap

    from rich.console import Console

    run_dir = tmp_path / ("a-long-run-directory-name-" * 4)
    result = TrainMcpResult(
        run_dir=run_dir, scenarios_file=run_dir / "scenarios.jsonl", model_name="mcp-agent", project="mcp-rl",
        backend_url="http://127.0.0.1:8123", owned_backend=owned, step=3, train_size=3, val_size=1,
        target_step=5, stopped="3 iterations in a row trained nothing",
    )  # fmt: skip
    out = io.StringIO()
    report(result, Console(file=out, width=40, color_system=None))
    printed = out.getvalue().splitlines()
    start = printed.index("    import art_adapters as aa")
    snippet = "\n".join(printed[start : start + 5])
    assert snippet == usage_snippet(result)
    compile(textwrap.dedent(snippet), "<snippet>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    assert ("LocalBackend" in snippet) == owned and "chat_model(step=3)" in snippet
    assert " ".join(" ".join(printed[start + 5 :]).split()) == (
        "training stopped before step 5: 3 iterations in a row trained nothing"
    )


async def test_a_tool_that_only_ever_fails_is_flagged_once() -> None:
    """Real rollouts on the calculator server: ``divide`` by zero fails every time and is named once;
    ``add``, which works, never is."""

    def policy(messages: list[BaseMessage]) -> AIMessage:
        if any(m.type == "ai" for m in messages):
            return AIMessage(content="done")
        calls = [
            {"name": "divide", "args": {"a": 1, "b": 0}, "id": "d"},
            {"name": "add", "args": {"a": 1, "b": 2}, "id": "a"},
        ]
        return AIMessage(content="", tool_calls=calls)

    tools = await mcp_tools.load_tools(server_command("calculator"))
    tally = ToolTally(min_calls=4)
    rollout = tally.counting(make_rollout(build_agent(PolicyChatModel(policy=policy), tools, max_turns=2)))
    await aa.run_groups(rollout, SCENARIOS[:1], n=3, max_failures=0, progress=False)
    assert tally.calls == {"divide": 3, "add": 3} and tally.errors["divide"] == 3 and tally.errors["add"] == 0
    assert tally.newly_failing() == []  # 3 calls: not yet enough to say
    await rollout(SCENARIOS[1])
    assert tally.newly_failing() == [("divide", 4)]
    await rollout(SCENARIOS[1])
    assert tally.newly_failing() == []  # named once
