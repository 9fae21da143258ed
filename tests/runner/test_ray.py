"""run_groups on Ray (RunConfig.ray_address): the local contract, on a real two-node Ray cluster.

The cluster is started here, on this machine (``ray.cluster_utils.Cluster``: a head node and a
second node, one CPU each); every test that needs it is skipped, with the reason shown, when Ray
is not installed. Rollouts run in Ray worker processes: failures come back with the worker's
traceback, timeouts and a killed worker are failures of that attempt (retried when allowed), an
MCP server is started on the worker, and a rollout talks HTTP to a server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import art_adapters as aa
from art_adapters._errors import ConfigError
from art_adapters._runner import scenario_id
from tests.helpers.json_server import JsonServer

try:
    import ray
except ImportError:  # the tests that need it are skipped, with this reason
    ray = None

NO_RAY = "Ray is not installed (pip install 'art-adapters[ray]'; the test extra has it)"


def tolerate(count: int, **settings: Any) -> aa.RunConfig:
    """A budget of ``count`` failed rollouts, whatever their share."""
    return aa.RunConfig(max_failures=count, max_failure_rate=None, **settings)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray cluster of two nodes on this machine (one CPU each); its address."""
    if ray is None:
        pytest.skip(NO_RAY)
    from ray.cluster_utils import Cluster

    # Functions defined in this test module travel by value: the workers cannot import tests.*.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    try:
        yield nodes.address
    finally:
        ray.shutdown()
        nodes.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def on_worker(config: aa.RunConfig, address: str) -> aa.RunConfig:
    return config.model_copy(update={"ray_address": address})


async def where(scenario: dict[str, Any]) -> aa.Trajectory:
    """A rollout that says which process and node ran it, after a short wait."""
    await asyncio.sleep(float(scenario.get("wait", 0.3)))
    return aa.Trajectory(
        messages=[aa.Message(role="user", content=str(scenario["q"]))],
        reward=1.0,
        metadata={"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()},
    )


async def test_rollouts_run_on_both_nodes_with_the_local_contract(cluster: str) -> None:
    seen: list[aa.RunProgress] = []
    scenarios = [{"q": f"s{i}"} for i in range(4)]
    groups = await aa.run_groups(
        where, scenarios, n=3, config=aa.RunConfig(max_concurrency=2, ray_address=cluster), progress=seen.append
    )
    assert [g.metadata["scenario_id"] for g in groups] == [scenario_id(s) for s in scenarios]
    trajectories = [t for g in groups for t in g.trajectories]
    assert len(trajectories) == 12 and all(not g.exceptions for g in groups)
    for group in groups:
        assert [t.metadata["rollout_index"] for t in group.trajectories] == [0, 1, 2]
        assert {t.metadata["group_id"] for t in group.trajectories} == {group.id}
        assert all(t.metadata["attempts"] == 1 for t in group.trajectories)
    assert len({t.id for t in trajectories}) == 12
    assert os.getpid() not in {t.metadata["pid"] for t in trajectories}
    assert len({t.metadata["node"] for t in trajectories}) == 2  # one CPU per node, two at once
    assert [p.done for p in seen] == list(range(1, 13)) and seen[-1].mean_reward == 1.0


async def test_a_failure_is_data_with_the_workers_traceback_and_counts_against_the_budget(cluster: str) -> None:
    async def flaky(scenario: dict[str, Any]) -> aa.Trajectory:
        if scenario["q"] == "bad":
            raise ValueError(f"boom in process {os.getpid()}")
        return aa.Trajectory(messages=[aa.Message(role="user", content="ok")], reward=0.5)

    scenarios = [{"q": "good"}, {"q": "bad"}]
    groups = await aa.run_groups(flaky, scenarios, n=2, config=on_worker(tolerate(2), cluster), progress=False)
    assert len(groups[0].trajectories) == 2 and not groups[0].exceptions
    failures = groups[1].exceptions
    assert [f.rollout_index for f in failures] == [0, 1]
    assert {f.type for f in failures} == {"builtins.ValueError"}
    pid = int(failures[0].message.rsplit(" ", 1)[1])
    assert pid != os.getpid()
    assert "in flaky" in failures[0].traceback and "boom in process" in failures[0].traceback
    assert failures[0].scenario_id == scenario_id(scenarios[1]) and failures[0].attempts == 1

    with pytest.raises(aa.RolloutBudgetError) as raised:
        await aa.run_groups(flaky, scenarios, n=2, config=on_worker(tolerate(1), cluster), progress=False)
    assert raised.value.setting == "max_failures" and "builtins.ValueError" in str(raised.value)


async def test_a_rollout_past_its_timeout_fails_on_the_worker(cluster: str) -> None:
    async def slow(scenario: dict[str, Any]) -> aa.Trajectory:
        await asyncio.sleep(60 if scenario["q"] == "slow" else 0)
        return aa.Trajectory(messages=[aa.Message(role="user", content="done")])

    started = time.monotonic()
    config = on_worker(tolerate(1, timeout_s=1.0), cluster)
    groups = await aa.run_groups(slow, [{"q": "slow"}, {"q": "quick"}], n=1, config=config, progress=False)
    assert time.monotonic() - started < 20
    [failure] = groups[0].exceptions
    assert failure.type == "builtins.TimeoutError" and "timeout_s=1 s" in failure.message
    assert len(groups[1].trajectories) == 1


async def test_a_rollout_blocked_in_sync_code_is_killed_by_the_driver(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollout stuck in blocking code cannot time itself out (its event loop never runs again): the
    driver kills its task BACKSTOP_GRACE_S after timeout_s, and the attempt fails as a timeout."""
    import art_adapters._ray as ray_rollouts

    monkeypatch.setattr(ray_rollouts, "BACKSTOP_GRACE_S", 2.0)  # our driver-side constant (30 s by default)
    marker = tmp_path / "stuck.pid"

    async def stuck(scenario: dict[str, Any]) -> aa.Trajectory:
        if scenario["q"] == "stuck":
            Path(scenario["marker"]).write_text(str(os.getpid()))
            time.sleep(120)  # blocking: asyncio's timeout cannot interrupt it
        return aa.Trajectory(messages=[aa.Message(role="user", content="done")])

    started = time.monotonic()
    config = on_worker(tolerate(1, timeout_s=1.0), cluster)
    scenarios = [{"q": "stuck", "marker": str(marker)}, {"q": "quick"}]
    groups = await aa.run_groups(stuck, scenarios, n=1, config=config, progress=False)
    assert time.monotonic() - started < 60
    [failure] = groups[0].exceptions
    assert failure.type == "builtins.TimeoutError", failure
    assert "timeout_s=1 s" in failure.message and "killed 2 s later" in failure.message
    assert len(groups[1].trajectories) == 1
    pid = int(marker.read_text())
    for _ in range(100):  # the killed worker process goes away
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail(f"the stuck worker {pid} is still running")


async def test_a_task_waiting_for_a_cpu_does_not_use_up_its_timeout(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three rollouts on two CPUs: the third waits in Ray's queue for a CPU as long as a rollout runs.
    Its timeout and the driver's backstop count from when it starts, so it finishes."""
    import art_adapters._ray as ray_rollouts

    monkeypatch.setattr(ray_rollouts, "BACKSTOP_GRACE_S", 1.0)
    started = time.monotonic()
    scenarios = [{"q": q, "wait": 3.0} for q in ("a", "b", "c")]
    config = on_worker(tolerate(0, timeout_s=4.5, max_concurrency=3), cluster)
    groups = await aa.run_groups(where, scenarios, n=1, config=config, progress=False)
    elapsed = time.monotonic() - started
    assert [len(group.trajectories) for group in groups] == [1, 1, 1]
    assert not any(group.exceptions for group in groups)
    # Two CPUs: one rollout started after another finished, so the run outlasted timeout plus grace
    # (5.5 s) counted from submission, the old backstop's clock (which killed it).
    assert elapsed > 6.0, elapsed


async def test_a_worker_killed_mid_rollout_fails_that_attempt_and_the_retry_finishes(
    cluster: str, tmp_path: Path
) -> None:
    marker = tmp_path / "victim.pid"

    def first_to_claim() -> bool:
        """True in exactly one process: the group's two victim rollouts start at once on the two
        nodes, so an exists-then-write check let both wait (and the one not killed timed out)."""
        try:
            os.close(os.open(tmp_path / "victim.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        written = tmp_path / "victim.pid.tmp"
        written.write_text(str(os.getpid()))
        os.replace(written, marker)  # the test never reads a half-written pid
        return True

    async def victim(scenario: dict[str, Any]) -> aa.Trajectory:
        if scenario["q"] == "victim" and first_to_claim():
            await asyncio.sleep(60)  # killed here
        await asyncio.sleep(0.2)
        return aa.Trajectory(messages=[aa.Message(role="user", content=scenario["q"])], reward=1.0)

    config = on_worker(tolerate(0, retries=1, timeout_s=45.0, max_concurrency=2), cluster)
    run = asyncio.create_task(
        aa.run_groups(victim, [{"q": "victim"}, {"q": "a"}, {"q": "b"}], n=2, config=config, progress=False)
    )
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    pid = int(marker.read_text())
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    groups = await asyncio.wait_for(run, 60)
    assert [len(g.trajectories) for g in groups] == [2, 2, 2]  # nothing lost
    assert all(not g.exceptions for g in groups)
    retried = [t for t in groups[0].trajectories if t.metadata["attempts"] == 2]
    assert len(retried) == 1
    assert any("attempt 1" in line and "WorkerCrashedError" in line for line in retried[0].logs), retried[0].logs


async def test_an_unserialisable_rollout_is_a_config_error_naming_what_failed(cluster: str) -> None:
    lock = threading.Lock()

    async def holds_a_lock(scenario: dict[str, Any]) -> aa.Trajectory:
        with lock:
            return aa.Trajectory()

    with pytest.raises(ConfigError) as raised:
        await aa.run_groups(holds_a_lock, [{"q": 1}], n=1, ray_address=cluster, progress=False)
    message = str(raised.value)
    assert "holds_a_lock cannot be sent to Ray workers" in message and "lock" in message.lower()


async def test_a_rollout_returning_no_awaitable_stops_the_run_as_locally(cluster: str) -> None:
    def not_async(scenario: dict[str, Any]) -> aa.Trajectory:
        return aa.Trajectory()

    with pytest.raises(ConfigError, match="not an awaitable.*raised on a Ray worker"):
        await aa.run_groups(not_async, [{"q": 1}], n=1, ray_address=cluster, progress=False)


async def test_a_rollout_talks_http_from_the_worker_with_its_key(cluster: str) -> None:
    server = JsonServer(lambda request: (200, {"answer": f"echo {request.json()['q']}"}))
    url = f"{server.url}/v1/answer"
    secret = "sk-test-" + os.urandom(8).hex()

    async def ask(scenario: dict[str, Any]) -> aa.Trajectory:
        import httpx

        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {secret}"}) as client:
            reply = await client.post(url, json={"q": scenario["q"], "pid": os.getpid()})
        reply.raise_for_status()
        content = reply.json()["answer"]
        return aa.Trajectory(messages=[aa.Message(role="assistant", content=content)], reward=1.0)

    try:
        groups = await aa.run_groups(ask, [{"q": "x"}, {"q": "y"}], n=2, ray_address=cluster, progress=False)
    finally:
        server.close()
    assert [[t.messages[0].content for t in g.trajectories] for g in groups] == [["echo x"] * 2, ["echo y"] * 2]
    seen = server.requests
    assert len(seen) == 4 and {s.headers["authorization"] for s in seen} == {f"Bearer {secret}"}
    assert os.getpid() not in {s.json()["pid"] for s in seen}


async def test_mcp_sessions_open_on_the_worker(cluster: str) -> None:
    import mcp_tools

    server = [sys.executable, "-m", "mcp_tools.servers.calculator"]

    async def calculate(scenario: dict[str, Any]) -> aa.Trajectory:
        # Loaded tools hold weak references (not serialisable): a rollout on Ray loads them itself.
        [add] = [t for t in await mcp_tools.load_tools(server) if t.name == "add"]
        async with mcp_tools.rollout() as scope:
            answer = await add.ainvoke({"a": scenario["a"], "b": 2})
            sessions = [sid for s in scope.sessions for sid in s.session_ids.values()]
        return aa.Trajectory(
            messages=[aa.Message(role="assistant", content=str(answer))],
            metadata={"pid": os.getpid(), "sessions": sessions},
        )

    groups = await aa.run_groups(calculate, [{"a": 1}, {"a": 40}], n=1, ray_address=cluster, progress=False)
    [[one], [forty]] = [g.trajectories for g in groups]
    assert "3" in one.messages[0].content and "42" in forty.messages[0].content
    assert one.metadata["pid"] != os.getpid() and one.metadata["sessions"] and forty.metadata["sessions"]


def test_ray_num_cpus_without_ray_address_is_refused() -> None:
    with pytest.raises(ValueError, match="ray_num_cpus applies to Ray tasks only"):
        aa.RunConfig(ray_num_cpus=0.5)
    assert aa.RunConfig(ray_address="auto", ray_num_cpus=0.5).ray_num_cpus == 0.5


async def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as when not installed

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        return aa.Trajectory()

    with pytest.raises(ImportError, match=r"pip install 'art-adapters\[ray\]'"):
        await aa.run_groups(rollout, [{"q": 1}], n=1, ray_address="auto", progress=False)


async def test_train_mcp_rollouts_build_their_agent_on_the_worker(
    cluster: str, fake_backend: Any, tmp_path: Path
) -> None:
    from pydantic import SecretStr

    from art_adapters.apps._train_mcp import TrainMcpConfig, _WorkerRollout
    from mcp_tools import Scenario

    model = aa.TrainableModel(name="ray-mcp", project="ray-tests")
    await model.register(fake_backend)
    config = TrainMcpConfig(
        server=f"{sys.executable} -m mcp_tools.servers.calculator", run_dir=tmp_path, ray_address=cluster
    )
    assert config.loop.run.ray_address == cluster  # --ray-address reaches run_groups through the loop
    rollout = _WorkerRollout(
        config=config,
        model=model.name,
        base_url=fake_backend.openai_base_url,
        api_key=SecretStr("not-needed"),
        temperature=1.0,
    )
    assert "not-needed" not in repr(rollout)
    scenario = Scenario(task="add 2 and 3", difficulty=1)
    groups = await aa.run_groups(rollout, [scenario], n=2, config=config.loop.run, progress=False)
    [group] = groups
    assert not group.exceptions, group.exceptions[:1]
    assert len(group.trajectories) == 2
    for trajectory in group.trajectories:
        assert trajectory.metadata["task"] == "add 2 and 3"
        assert trajectory.metadata["mcp_sessions"]  # the calculator was started on the worker
        assert any(m.role == "assistant" for m in trajectory.messages)


async def test_the_pipelined_loop_runs_its_rollouts_on_ray_and_resumes_after_a_crash(
    cluster: str, fake_backend: Any, tmp_path: Path
) -> None:
    """``LoopConfig.max_staleness`` with Ray rollouts: the groups sampled on the workers are kept
    on disk like local ones, and a restarted loop trains or drops them; none is trained twice."""
    model = aa.TrainableModel(name="pipe-ray", project="ray-tests")
    await model.register(fake_backend)
    url = fake_backend.openai_base_url

    async def rollout(scenario: dict[str, Any]) -> aa.Trajectory:
        import openai

        ask = [{"role": "user", "content": f"What is {scenario['q']}?"}]
        async with openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0) as client:
            reply = await client.chat.completions.create(model="pipe-ray", messages=ask, temperature=1.0, max_tokens=4)
        turn = aa.Message(
            role="assistant", content=reply.choices[0].message.content, completion_id=reply.id, model=reply.model
        )
        return aa.Trajectory(messages=[aa.Message(**ask[0]), turn], metadata={"pid": os.getpid()})

    def brevity(trajectory: aa.Trajectory, scenario: Any) -> float:
        return 1.0 / (1.0 + len(trajectory.messages[-1].content or ""))

    config = aa.LoopConfig(
        steps=3, groups_per_step=1, rollouts_per_group=3, max_staleness=1, run_dir=tmp_path, progress=False,
        run=aa.RunConfig(ray_address=cluster, max_concurrency=3, timeout_s=60),
    )  # fmt: skip
    scenarios = [{"id": f"r{i}", "q": f"{i} + {i}"} for i in range(6)]

    class Crash(Exception):
        pass

    def crash(report: Any) -> None:
        if report.step == 1:
            raise Crash

    with pytest.raises(Crash):
        await aa.train_loop(model, rollout, scenarios, score=aa.verifiable_scorer(brevity), config=config, on_step=crash)
    assert await model.get_step() == 1
    result = await aa.train_loop(model, rollout, scenarios, score=aa.verifiable_scorer(brevity), config=config)
    assert result.start_step == 1 and result.final_step == 3
    events = [json.loads(line) for line in (tmp_path / "batches/pipeline/events.jsonl").read_text().splitlines()]
    trained = [k for e in events if e["event"] == "trained" for k in e["keys"]]
    assert len(trained) == len(set(trained)) == 3
    groups = [json.loads(p.read_text()) for p in (tmp_path / "batches/pipeline").glob("group-*.scored.jsonl")]
    pids = {t["metadata"]["pid"] for g in groups for t in g["trajectories"]}
    assert pids and os.getpid() not in pids
