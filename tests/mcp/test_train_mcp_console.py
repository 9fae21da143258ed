"""What train-mcp says: lines that say what happened and what to do (issue 25, points 5 and 6).

The step lines come from the loop's own reports, the tool tally from real trajectories' tool records, and
the capability warnings from the real server-everything's tool list."""

from __future__ import annotations

import logging

import pytest
from rich.console import Console

import art_adapters as aa
import mcp_tools
from art_adapters.apps._mcp_console import StepConsole, ToolTally
from tests.helpers.third_party import node_server


def _console() -> Console:
    return Console(record=True, width=400, color_system=None)


def _lines(console: Console) -> list[str]:
    return console.export_text().splitlines()


def test_a_step_that_trained_nothing_is_named_by_the_step_it_tried_to_make() -> None:
    console = _console()
    lines = StepConsole(console, max_tokens=128)
    lines.on_step(aa.StepReport(step=0, trained=False, reason="every group has zero variance", reward_mean=0.0))
    lines.on_step(aa.StepReport(step=1, trained=True, reward_mean=0.41, metrics={"tool_call_rate": 1.0}))
    assert _lines(console) == [
        "step 1: mean reward 0.000, not trained (every group has zero variance); the model stays at step 0",
        "step 1: mean reward 0.410, tools called in 100% of rollouts, trained",
    ]


def test_a_forced_call_cut_by_the_token_limit_is_said_once_with_what_to_change() -> None:
    console = _console()
    lines = StepConsole(console, max_tokens=64)
    lines.on_eval(aa.EvalReport(step=0, reward_mean=0.2, scored=4, trajectories=4, exceptions=0,
                                metrics={"first_turn_cut_mean": 0.25}))  # fmt: skip
    lines.on_step(aa.StepReport(step=1, trained=True, reward_mean=0.3, metrics={"first_turn_cut_mean": 0.5}))
    said = [line for line in _lines(console) if "reached --max-tokens" in line]
    assert said == [
        "25% of these rollouts' forced first turns reached --max-tokens (64) before their tool call was complete "
        "(it did not parse; metrics.jsonl: first_turn_cut_mean); raise --max-tokens or lower --max-arg-chars / "
        "--max-arg-items"
    ]


def test_a_hacking_warning_before_any_training_says_it_is_the_base_models_behaviour() -> None:
    console = _console()
    lines = StepConsole(console)
    warning = aa.HackingWarning(signal="answer_length", step=0, message="answers grew", check="read them")
    lines.on_warning(warning)
    lines.on_step(aa.StepReport(step=1, trained=True, reward_mean=0.5))
    lines.on_warning(warning.model_copy(update={"step": 1}))
    out = _lines(console)
    assert out[0] == warning.line() + " (no step has trained yet: this is the base model's own behaviour)"
    assert out[2] == warning.model_copy(update={"step": 1}).line()


def _failing(result: str) -> aa.Trajectory:
    record = aa.ToolCallRecord(name="git_status", result=result, is_error=True, source="mcp")
    return aa.Trajectory(tool_records=[record, record])


@pytest.mark.parametrize(
    ("error", "hint"),
    [
        ("Repository path '/home/me/repo' is outside the allowed repository '/tmp/x/repo'", "--cwd {state:SOURCE}"),
        ("Error executing tool git_status: 'github.com/x' is not a valid git repository", "--cwd {state:SOURCE}"),
        ("Error: GITHUB_TOKEN is not set", "--exclude-tools git_status"),
    ],
)
def test_a_tool_that_only_fails_gets_the_hint_its_errors_call_for(error: str, hint: str) -> None:
    tally = ToolTally(min_calls=4)
    console = _console()
    lines = StepConsole(console, tally)
    tally.add(_failing(error))
    tally.add(_failing(error))
    lines.on_step(aa.StepReport(step=1, trained=True, reward_mean=0.1))
    (flagged,) = [line for line in _lines(console) if line.startswith("tool 'git_status'")]
    assert "failed in all 4 of its calls so far (last error: " in flagged and hint in flagged
    assert ("--exclude-tools" in flagged) == ("--exclude-tools" in hint)


async def test_load_tools_warns_about_tools_needing_tasks_and_open_world_tools(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="mcp_tools"):
        tools = await mcp_tools.load_tools(node_server("mcp-server-everything"), name="everything")
    assert "echo" in {t.name for t in tools}
    messages = [r.getMessage() for r in caplog.records]
    (tasks,) = [m for m in messages if "MCP task" in m]
    (world,) = [m for m in messages if "open world" in m]
    assert tasks.startswith("MCP server 'everything': simulate-research-query can only be called as an MCP task")
    assert "--exclude-tools" in tasks
    assert world.startswith("MCP server 'everything': gzip-file-as-resource reach an open world")
    assert "echo" not in tasks + world  # annotated closed-world, no task needed


async def test_a_local_http_server_is_named_by_its_port_and_an_unreachable_one_is_not_started() -> None:
    from art_adapters import ToolServerError
    from tests.helpers.third_party import free_port

    port = free_port()  # nothing listens there
    with pytest.raises(ToolServerError) as caught:
        await mcp_tools.load_tools(f"http://127.0.0.1:{port}/mcp", connect_timeout_s=10)
    assert str(caught.value).startswith(f"could not reach MCP server 'http_{port}' (http://127.0.0.1:{port}/mcp)")


def test_the_mcp_sdks_per_request_info_lines_are_quieted_like_httpx() -> None:
    from art_adapters.apps._options import quiet_http_logs

    root, sdk = logging.getLogger(), logging.getLogger("mcp")
    saved = root.level, sdk.level
    try:
        root.setLevel(logging.INFO)
        sdk.setLevel(logging.NOTSET)
        quiet_http_logs()
        assert not logging.getLogger("mcp.client.streamable_http").isEnabledFor(logging.INFO)
    finally:
        root.setLevel(saved[0])
        sdk.setLevel(saved[1])
