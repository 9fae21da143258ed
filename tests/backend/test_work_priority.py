"""The server's model and request work runs below the event loop's OS priority (``serve --work-nice``).

Under load on two cores, the event loop waited for a busy CPU before it could answer ``/health``
(bench/soak.py, four alternated runs each way: p99 7.7-11.5x idle with the decode, parsing and grammar
threads at the event loop's priority, 5.7-8.8x with them 10 nice levels lower). Linux keeps a nice value per thread.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import httpx
import pytest
from art_adapters_backend.config import ServeConfig
from art_adapters_backend.threads import lower_thread_priority, set_work_nice

from art_adapters import LocalBackend

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's"
)


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_a_thread_lowers_its_own_priority_and_the_threads_it_starts_inherit_it() -> None:
    caller = _nice(threading.get_native_id())
    seen: dict[str, int] = {}

    def child() -> None:
        seen["child"] = _nice(threading.get_native_id())

    def worker() -> None:
        seen["applied"] = lower_thread_priority(3)
        seen["worker"] = _nice(threading.get_native_id())
        inner = threading.Thread(target=child)
        inner.start()
        inner.join()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"applied": 3, "worker": min(19, caller + 3), "child": min(19, caller + 3)}
    assert _nice(threading.get_native_id()) == caller  # the caller's own priority is untouched


def test_the_default_increment_is_the_servers_setting() -> None:
    seen: list[int] = []
    try:
        set_work_nice(0)
        thread = threading.Thread(target=lambda: seen.append(lower_thread_priority()))
        thread.start()
        thread.join()
        set_work_nice(2)
        thread = threading.Thread(target=lambda: seen.append(lower_thread_priority()))
        thread.start()
        thread.join()
    finally:
        set_work_nice(0)
    assert seen == [0, 2]
    with pytest.raises(ValueError, match="between 0 and 19"):
        set_work_nice(20)
    assert ServeConfig().work_nice == 10
    with pytest.raises(ValueError, match="work_nice"):
        ServeConfig(work_nice=-1)


def _thread_nices(pid: int) -> dict[int, int]:
    """Nice value of every thread of process *pid* (``/proc/PID/task/TID/stat``, field 19)."""
    nices = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        nices[int(task.name)] = int(fields[16])
    return nices


@pytest.mark.slow
async def test_the_served_models_threads_run_below_the_event_loop(local_backend: LocalBackend) -> None:
    async with httpx.AsyncClient(base_url=local_backend.base_url, timeout=120) as http:
        reply = await http.post("/v1/chat/completions", json={
            "model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})  # fmt: skip
        assert reply.status_code == 200, reply.text
    assert local_backend.process is not None
    pid = local_backend.process.pid
    nices = _thread_nices(pid)
    base = nices.pop(pid)  # the main thread runs the event loop
    lowered = [tid for tid, nice in nices.items() if nice == min(19, base + 10)]
    # the engine's decode thread and the request pool's threads that rendered and tokenised the prompt
    assert len(lowered) >= 2, nices
    assert all(nice in (base, min(19, base + 10)) for nice in nices.values()), nices
