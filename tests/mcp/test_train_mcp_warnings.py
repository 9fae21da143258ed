"""``train-mcp`` prints each reward-hacking warning on its console as the loop raises it.

Its hand-over to the training loop (``_train``) runs on the backend app (fake engine and trainer)
with a real scripted judge on 127.0.0.1 that rewards length; the rollout of tests/loop/test_hacking.py
is allowed 1 token at step 0 and 8 from step 1 on, so the answers grow and the monitor (window 1)
warns at step 2. The console must show the warnings, one yellow line each, as the step reports hold them.
"""

from __future__ import annotations

from pathlib import Path

from langchain_openai import ChatOpenAI
from rich.console import Console

from art_adapters import HackingMonitorConfig
from art_adapters.apps._train_mcp import TrainMcpConfig, _train
from tests.helpers.fake_backend import FakeBackend
from tests.helpers.models import registered
from tests.helpers.judge_server import JudgeServer
from tests.helpers.scripted_judges import length_loving
from tests.loop.test_hacking import drifting_rollout
from tests.loop.test_loop import loop_config, scenarios


async def test_each_hacking_warning_is_a_yellow_console_line(
    fake_backend: FakeBackend, tmp_path: Path
) -> None:
    model = await registered(fake_backend, "mcp-warned", "loop-tests")
    loop = loop_config(tmp_path, steps=2, eval_every=0).model_copy(
        update={"hacking": HackingMonitorConfig(window=1)}
    )
    config = TrainMcpConfig(server="python -m mcp_tools.servers.notes", run_dir=tmp_path, loop=loop)
    console = Console(record=True, width=400, force_terminal=True, color_system="standard")
    rollout = drifting_rollout(model)
    with JudgeServer() as server:
        server.reset(default=length_loving)
        judge = ChatOpenAI(base_url=server.url, api_key="t", model="long", max_retries=0, temperature=0)
        result = await _train(
            model, rollout, rollout, scenarios("w", 4), [], judge, {"cache": False, "max_retries": 0},
            config, console,
        )  # fmt: skip
    warnings = [w for step in result.steps for w in step.warnings]
    assert result.final_step == 2 and warnings  # the answers grew: at least answer_length
    assert "answer_length" in {w.signal for w in warnings}
    styled = console.export_text(styles=True, clear=False)
    lines = console.export_text().splitlines()
    for warning in warnings:
        assert warning.line() in lines  # one line each, the text as the warning says it
        assert f"\x1b[33m{warning.line()}\x1b[0m" in styled  # in yellow
