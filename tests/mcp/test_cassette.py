"""MCP record and replay: a real server whose answers change on every call, recorded to a cassette and
replayed from it (shared by a group of rollouts, offline without the server, over stdio and HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage

import mcp_tools
from art_adapters import ConfigError, ToolServerError, Trajectory
from art_adapters._capture.langchain import TrajectoryCallbackHandler
from tests.helpers import counter_server
from tests.helpers.capture_fakes import PolicyChatModel, react_agent
from tests.helpers.processes import announced_url, wait_for_line

ROOT = Path(__file__).resolve().parents[2]
QUESTION = {"messages": [("user", "tick a twice, then b")]}
#: A stdio server that cannot start: replaying must never try.
OFFLINE = {"command": str(ROOT / "no-such-folder" / "counter-server")}


def counter(tmp_path: Path, *args: str) -> dict:
    """The counter server over stdio, logging each answered call to ``tmp_path/calls.txt``."""
    command = counter_server.command("--calls-file", str(tmp_path / "calls.txt"), *args)
    return {"command": command[0], "args": command[1:], "cwd": str(ROOT)}


def live_calls(tmp_path: Path) -> list[str]:
    """The answers the server really gave (one line per call that reached it)."""
    path = tmp_path / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def tick(label: str, call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "tick", "args": {"label": label}, "id": call_id}])


def policy_of(*labels: str):
    """One ``tick`` call per turn (labels in order), then a final answer."""
    turns = [tick(label, f"call_{i}") for i, label in enumerate(labels)] + [AIMessage(content="done")]

    def policy(messages):
        return turns[min(sum(1 for m in messages if m.type == "ai"), len(turns) - 1)]

    return policy


async def run_agent(tools, *labels: str, cassette: mcp_tools.Cassette | None = None) -> Trajectory:
    """One rollout of a react agent that calls ``tick`` once per label; its captured trajectory."""
    handler = TrajectoryCallbackHandler()
    agent = react_agent(PolicyChatModel(policy=policy_of(*(labels or ("a", "a", "b")))), tools)
    async with mcp_tools.rollout(cassette=cassette):
        await agent.ainvoke(QUESTION, config={"callbacks": [handler]})
    return handler.trajectory


def tool_texts(trajectory: Trajectory) -> list[str]:
    return [str(m.content) for m in trajectory.messages if m.role == "tool"]


def cassette_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
async def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A cassette recorded from one rollout (tick a, tick a, tick b) and the answers it saw."""
    folder = tmp_path_factory.mktemp("recording")
    path = folder / "ticks.jsonl"
    cassette = mcp_tools.Cassette(path, mode="record")
    tools = await mcp_tools.load_tools(counter(folder), name="counter", cassette=cassette)
    return path, tool_texts(await run_agent(tools))


async def test_recording_then_replaying_gives_identical_results(tmp_path: Path) -> None:
    path = tmp_path / "ticks.jsonl"
    cassette = mcp_tools.Cassette(path, mode="record")
    tools = await mcp_tools.load_tools(counter(tmp_path), name="counter", cassette=cassette)
    recorded = await run_agent(tools)
    texts = tool_texts(recorded)
    assert len(set(texts)) == 3 and texts[0].startswith("a#") and texts[2].startswith("b#")
    assert live_calls(tmp_path) == texts  # every answer came from the server
    assert [r.model_dump().get("replayed") for r in recorded.tool_records] == [False, False, False]

    lines = cassette_lines(path)
    assert [line["type"] for line in lines] == ["header", "tools", "call", "call", "call"]
    calls = [line for line in lines if line["type"] == "call"]
    assert [(c["tool"], c["arguments"], c["occurrence"]) for c in calls] == [
        ("tick", {"label": "a"}, 0),
        ("tick", {"label": "a"}, 1),
        ("tick", {"label": "b"}, 0),
    ]
    assert [c["result"]["content"][0]["text"] for c in calls] == texts
    assert all(c["duration_s"] > 0 and c["started_at"] for c in calls)

    # Replayed against the same live server: the recorded answers, and the server is not called.
    replay = mcp_tools.Cassette(path)
    again = await run_agent(await mcp_tools.load_tools(counter(tmp_path), name="counter", cassette=replay))
    assert tool_texts(again) == texts
    assert live_calls(tmp_path) == texts
    records = again.tool_records
    assert [(r.name, r.result, r.model_dump()["replayed"]) for r in records] == [
        ("tick", text, True) for text in texts
    ]
    assert [r.call_id for r in records] == ["call_0", "call_1", "call_2"]
    assert all(r.session_id is None for r in records)  # no session was opened for them


async def test_replay_works_offline_without_starting_the_server(recording: tuple[Path, list[str]]) -> None:
    path, texts = recording
    cassette = mcp_tools.Cassette(path)
    tools = await mcp_tools.load_tools(OFFLINE, name="counter", cassette=cassette)
    assert [t.name for t in tools] == ["tick", "oops"]  # the recorded tool list
    handler = TrajectoryCallbackHandler()
    agent = react_agent(PolicyChatModel(policy=policy_of("a", "a", "b")), tools)
    async with mcp_tools.rollout() as scope:
        await agent.ainvoke(QUESTION, config={"callbacks": [handler]})
        assert scope.sessions == []  # nothing was started
    assert tool_texts(handler.trajectory) == texts
    assert handler.trajectory.error is None

    # The cassette given to the rollout works as well (tools listed offline from it too).
    async with mcp_tools.rollout(cassette=mcp_tools.Cassette(path)):
        tools = await mcp_tools.load_tools(OFFLINE, name="counter")
        tick_tool = next(t for t in tools if t.name == "tick")
        assert await tick_tool.ainvoke({"label": "b"}) == texts[2]


async def test_a_session_records_to_a_cassette_that_replays_offline(tmp_path: Path) -> None:
    """``McpSession.load_tools(cassette=)``: an explicit session records its tool list and calls."""
    path = tmp_path / "session.jsonl"
    async with mcp_tools.McpSession(counter(tmp_path), name="counter") as session:
        tools = await session.load_tools(cassette=mcp_tools.Cassette(path, mode="record"))
        texts = tool_texts(await run_agent(tools))
    assert live_calls(tmp_path) == texts and len(set(texts)) == 3
    assert [line["type"] for line in cassette_lines(path)] == ["header", "tools", "call", "call", "call"]

    offline = await mcp_tools.load_tools(OFFLINE, name="counter", cassette=mcp_tools.Cassette(path))
    replayed = await run_agent(offline)
    assert tool_texts(replayed) == texts
    assert all(r.model_dump()["replayed"] for r in replayed.tool_records)


async def test_a_group_sharing_one_cassette_sees_identical_results(tmp_path: Path) -> None:
    cassette = mcp_tools.Cassette(tmp_path / "group.jsonl", mode="record")
    tools = await mcp_tools.load_tools(counter(tmp_path), name="counter", cassette=cassette)
    group = await asyncio.gather(*(run_agent(tools) for _ in range(4)))
    texts = [tool_texts(t) for t in group]
    assert all(t == texts[0] for t in texts), texts
    assert len(set(texts[0])) == 3  # tick(a) twice in one rollout: two answers, by occurrence
    assert sorted(live_calls(tmp_path)) == sorted(texts[0])  # each distinct call reached the server once
    replayed = [[r.model_dump()["replayed"] for r in t.tool_records] for t in group]
    assert sum(flag for flags in replayed for flag in flags) == 9  # 12 calls, 3 of them live

    # Two groups, one cassette each (given to the rollout): identical within a group, not across.
    groups = [mcp_tools.Cassette(tmp_path / f"scenario-{i}.jsonl", mode="record") for i in range(2)]
    plain = await mcp_tools.load_tools(counter(tmp_path), name="counter")
    runs = await asyncio.gather(*(run_agent(plain, "c", cassette=groups[i % 2]) for i in range(4)))
    first, second = tool_texts(runs[0]), tool_texts(runs[1])
    assert tool_texts(runs[2]) == first and tool_texts(runs[3]) == second and first != second
    # A rollout's own cassette records the server's tool list too, so it can be replayed alone.
    offline = await mcp_tools.load_tools(OFFLINE, name="counter", cassette=mcp_tools.Cassette(groups[1].path))
    assert tool_texts(await run_agent(offline, "c")) == second


async def test_a_call_missing_from_the_cassette_fails_clearly_or_goes_live(
    recording: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, texts = recording
    before = path.read_bytes()
    strict = await mcp_tools.load_tools(OFFLINE, name="counter", cassette=mcp_tools.Cassette(path))
    tick_tool = next(t for t in strict if t.name == "tick")
    async with mcp_tools.rollout():
        assert await tick_tool.ainvoke({"label": "a"}) == texts[0]
        assert await tick_tool.ainvoke({"label": "a"}) == texts[1]
        with pytest.raises(mcp_tools.CassetteMissError) as third:
            await tick_tool.ainvoke({"label": "a"})  # a third tick(a): only two were recorded
        with pytest.raises(mcp_tools.CassetteMissError) as other:
            await tick_tool.ainvoke({"label": "zzz"})
    message = str(other.value)
    assert "tick" in message and '{"label":"zzz"}' in message and str(path) in message
    assert '{"label":"a"}' in message  # what it does hold
    assert "call number 3" in str(third.value) and "2 answer(s)" in str(third.value)
    # Through an agent, the rollout ends with that error.
    with pytest.raises(mcp_tools.CassetteMissError, match="zzz"):
        await run_agent(strict, "zzz")

    # on_missing="live": the missing call reaches the live server; a replay cassette is not written.
    live = mcp_tools.Cassette(path, on_missing="live")
    tools = await mcp_tools.load_tools(counter(tmp_path), name="counter", cassette=live)
    trajectory = await run_agent(tools, "a", "zzz")
    assert tool_texts(trajectory)[0] == texts[0]
    went_live = tool_texts(trajectory)[1]
    assert live_calls(tmp_path) == [went_live] and went_live.startswith("zzz#")
    assert [r.model_dump()["replayed"] for r in trajectory.tool_records] == [True, False]
    assert path.read_bytes() == before

    # record_new: the missing call is appended, and a later replay finds it offline.
    extended = tmp_path / "extended.jsonl"
    extended.write_bytes(before)
    grow = mcp_tools.Cassette(extended, mode="record_new")
    tools = await mcp_tools.load_tools(counter(tmp_path), name="counter", cassette=grow)
    answers = tool_texts(await run_agent(tools, "b", "new"))
    assert answers[0] == texts[2] and answers[1].startswith("new#")
    assert len(cassette_lines(extended)) == len(cassette_lines(path)) + 1
    offline = await mcp_tools.load_tools(OFFLINE, name="counter", cassette=mcp_tools.Cassette(extended))
    assert tool_texts(await run_agent(offline, "b", "new")) == answers


async def test_a_cancelled_call_hands_its_slot_to_an_identical_waiting_call(tmp_path: Path) -> None:
    cassette = mcp_tools.Cassette(tmp_path / "cancel.jsonl", mode="record")
    tools = await mcp_tools.load_tools(counter(tmp_path), name="counter", cassette=cassette)
    tick_tool = next(t for t in tools if t.name == "tick")

    async def one_rollout(rollout_id: str) -> str:
        async with mcp_tools.rollout(rollout_id):
            return await tick_tool.ainvoke({"label": "a"})

    first = asyncio.create_task(one_rollout("first"))
    await asyncio.sleep(0.05)  # it has claimed tick(a) and is starting its server
    second = asyncio.create_task(one_rollout("second"))
    await asyncio.sleep(0.05)  # it waits for the first one's answer
    first.cancel()
    answer = await asyncio.wait_for(second, 30)
    assert first.cancelled()
    assert live_calls(tmp_path) == [answer]
    assert [(c.rollout_id, c.result["content"][0]["text"]) for c in cassette.calls] == [("second", answer)]


async def test_tool_errors_are_recorded_and_replayed(tmp_path: Path) -> None:
    path = tmp_path / "errors.jsonl"
    tools = await mcp_tools.load_tools(
        counter(tmp_path), name="counter", cassette=mcp_tools.Cassette(path, mode="record")
    )
    oops = next(t for t in tools if t.name == "oops")
    first = await oops.ainvoke({"label": "x"})  # an MCP isError result: the tool handles it
    offline = await mcp_tools.load_tools(OFFLINE, name="counter", cassette=mcp_tools.Cassette(path))
    again = await next(t for t in offline if t.name == "oops").ainvoke({"label": "x"})
    assert again == first and "oops x#1" in first
    (call,) = [line for line in cassette_lines(path) if line["type"] == "call"]
    assert call["result"]["isError"] is True


async def test_a_recorded_server_failure_is_replayed_as_one(tmp_path: Path) -> None:
    path = tmp_path / "hang.jsonl"
    tools = await mcp_tools.load_tools(
        counter(tmp_path, "--debug-tools"),
        name="counter",
        call_timeout_s=1,
        cassette=mcp_tools.Cassette(path, mode="record"),
    )
    sleep = next(t for t in tools if t.name == "sleep")
    async with mcp_tools.rollout():
        with pytest.raises(ToolServerError, match="no answer within 1s"):
            await sleep.ainvoke({"seconds": 30})
    offline = await mcp_tools.load_tools(OFFLINE, name="counter", cassette=mcp_tools.Cassette(path))
    async with mcp_tools.rollout():
        with pytest.raises(ToolServerError, match=r"(?s)no answer within 1s.*replayed from cassette"):
            await next(t for t in offline if t.name == "sleep").ainvoke({"seconds": 30})


def test_a_cut_or_corrupt_line_is_named(recording: tuple[Path, list[str]], tmp_path: Path) -> None:
    path, _ = recording
    lines = path.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    with pytest.raises(mcp_tools.CassetteError, match=rf"cut\.jsonl:{len(lines)}: .*cut short"):
        mcp_tools.Cassette(cut)
    with pytest.raises(mcp_tools.CassetteError, match=rf"cut\.jsonl:{len(lines)}:"):
        mcp_tools.Cassette(cut, mode="record_new")

    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text("".join(lines[:2]) + '{"type": "call", "server": "counter"\n' + "".join(lines[2:]))
    with pytest.raises(mcp_tools.CassetteError, match=r"garbled\.jsonl:3: invalid cassette line") as info:
        mcp_tools.Cassette(garbled)
    assert "cut short" not in str(info.value)

    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"type": "call", "server": "counter", "tool": "tick", "occurrence": -1}\n')
    with pytest.raises(mcp_tools.CassetteError, match=r"wrong\.jsonl:1: .*occurrence"):
        mcp_tools.Cassette(wrong)

    with pytest.raises(mcp_tools.CassetteError, match="no cassette at .*record one first"):
        mcp_tools.Cassette(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match="use mode='replay'"):
        mcp_tools.Cassette(tmp_path / "x.jsonl", mode="record", on_missing="fail")
    with pytest.raises(ConfigError, match="not one of"):
        mcp_tools.Cassette(tmp_path / "x.jsonl", mode="playback")  # type: ignore[arg-type]


_RECORD_THEN_HANG = """
import asyncio, sys
import mcp_tools
from tests.helpers import counter_server

async def main(path, calls):
    command = counter_server.command("--debug-tools", "--calls-file", calls)
    server = {"command": command[0], "args": command[1:]}
    cassette = mcp_tools.Cassette(path, mode="record")
    tools = {t.name: t for t in await mcp_tools.load_tools(server, name="counter", cassette=cassette)}
    async with mcp_tools.rollout():
        for label in ("a", "b", "a"):
            print("ANSWER", await tools["tick"].ainvoke({"label": label}), flush=True)
        print("HANGING", flush=True)
        await tools["sleep"].ainvoke({"seconds": 120})

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_a_crash_mid_recording_loses_nothing_already_recorded(tmp_path: Path) -> None:
    path = tmp_path / "crash.jsonl"
    process = await asyncio.to_thread(
        subprocess.Popen,
        [sys.executable, "-c", _RECORD_THEN_HANG, str(path), str(tmp_path / "calls.txt")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own process group: killed with its server at once
    )
    try:
        answers = []
        for _ in range(3):
            line = await asyncio.to_thread(wait_for_line, process, process.stdout, "ANSWER", "recorder")
            answers.append(line.split()[1])
        await asyncio.to_thread(wait_for_line, process, process.stdout, "HANGING", "recorder")
        await asyncio.sleep(0.3)  # the sleep call is in flight
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the recorder and its server die at once
        process.wait()
    cassette = mcp_tools.Cassette(path)
    assert [(c.tool, c.arguments["label"], c.occurrence) for c in cassette.calls] == [
        ("tick", "a", 0),
        ("tick", "b", 0),
        ("tick", "a", 1),
    ]
    tools = {t.name: t for t in await mcp_tools.load_tools(OFFLINE, name="counter", cassette=cassette)}
    async with mcp_tools.rollout():
        replayed = [await tools["tick"].ainvoke({"label": label}) for label in ("a", "b", "a")]
    assert replayed == answers


@pytest.fixture
def http_counter(tmp_path: Path) -> Iterator[str]:
    """The counter server over streamable HTTP on a free port; yields its URL."""
    process = subprocess.Popen(
        counter_server.command(
            "--transport", "http", "--port", "0", "--calls-file", str(tmp_path / "calls.txt")
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    with announced_url(process, "counter server") as url:
        yield url


async def test_record_and_replay_over_streamable_http(tmp_path: Path, http_counter: str) -> None:
    path = tmp_path / "http.jsonl"
    cassette = mcp_tools.Cassette(path, mode="record")
    tools = await mcp_tools.load_tools(http_counter, name="counter", cassette=cassette)
    group = await asyncio.gather(*(run_agent(tools) for _ in range(2)))
    texts = tool_texts(group[0])
    assert tool_texts(group[1]) == texts and len(set(texts)) == 3
    assert sorted(live_calls(tmp_path)) == sorted(texts)

    # Nothing listens at this URL: replay still works.
    offline = await mcp_tools.load_tools(
        "http://127.0.0.1:9/mcp", name="counter", cassette=mcp_tools.Cassette(path)
    )
    assert tool_texts(await run_agent(offline)) == texts
