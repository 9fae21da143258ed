"""The one crash rule of every append-only log (``art_adapters.files.append_durably``), and every
writer that uses it: a last line without its newline was never acknowledged and is cut off before
the next append; an append that fails part-way is cut off at once; new files are private.
"""

from __future__ import annotations

import asyncio
import json
import logging
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from art_adapters import Trajectory, TrajectoryGroup, load_groups, save_groups
from art_adapters.files import PRIVATE_FILE_MODE, append_durably, cut_torn_line
from art_adapters.observe import MetricsHistory
from art_adapters_backend.serving.records import ChoiceRecord, CompletionRecord, RecordStore
from mcp_tools import Cassette, Scenario, load_scenarios
from mcp_tools._scenarios import append_scenarios

TORN = b'{"half": "a line a crash cut'


def test_lines_are_appended_whole_and_each_append_returns_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "log.jsonl"
    assert append_durably(path, b'{"a": 1}\n') == 0
    assert append_durably(path, b'{"b": 2}\n{"c": 3}\n') == 9
    assert path.read_bytes() == b'{"a": 1}\n{"b": 2}\n{"c": 3}\n'


def test_a_new_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    append_durably(path, b"{}\n")
    assert stat.S_IMODE(path.stat().st_mode) == PRIVATE_FILE_MODE


def test_data_without_its_newline_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="newline"):
        append_durably(tmp_path / "log.jsonl", b'{"a": 1}')
    assert not (tmp_path / "log.jsonl").exists()


def test_a_torn_last_line_is_cut_off_before_the_append(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n' + TORN)
    with caplog.at_level(logging.WARNING, logger="art_adapters.files"):
        assert append_durably(path, b'{"b": 2}\n') == 9
    assert path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    assert "cut a torn last line" in caplog.text


@pytest.mark.parametrize("before", [b"", b"x" * 200_000 + b"\n"], ids=["alone", "after-a-long-line"])
def test_a_torn_line_longer_than_one_read_is_cut_whole(tmp_path: Path, before: bytes) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(before + b"y" * 150_000)  # the last newline is more than one scan chunk back
    assert cut_torn_line(path) == len(before)
    assert path.read_bytes() == before
    assert cut_torn_line(path) == len(before)  # a whole file is left alone
    assert cut_torn_line(tmp_path / "missing.jsonl") == 0


def test_an_append_the_disk_refuses_part_way_is_cut_off(tmp_path: Path) -> None:
    # A file-size limit makes the write stop part-way (EFBIG), as a full disk does.
    path = tmp_path / "log.jsonl"
    append_durably(path, b'{"a": 1}\n')
    script = (
        "import resource, sys\n"
        "from art_adapters.files import append_durably\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "try:\n"
        f"    append_durably({str(path)!r}, b'x' * 10000 + b'\\n')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__, exc.errno)\n"
        "    sys.exit(0)\n"
        "sys.exit('the append did not fail')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert path.read_bytes() == b'{"a": 1}\n'  # the 4,087 bytes that fitted were cut off
    assert append_durably(path, b'{"b": 2}\n') == 9


def _record(n: int) -> CompletionRecord:
    choice = ChoiceRecord(index=0, completion_token_ids=[1, 2], logprobs=[-0.1, -0.2], finish_reason="stop", text="hi")
    return CompletionRecord(
        id=f"chatcmpl-{n}", model="m", base_model="m", prompt_token_ids=[3], temperature=1.0, top_p=1.0,
        max_tokens=8, choices=[choice],
    )


def _metrics(path: Path, n: int) -> None:
    MetricsHistory(path).append(n, {"loss": 0.5})


def _scenarios(path: Path, n: int) -> None:
    append_scenarios([Scenario(task=f"add up the numbers {n}", difficulty=1)], path)


def _groups(path: Path, n: int) -> None:
    save_groups(path, [TrajectoryGroup(trajectories=[Trajectory(reward=float(n))])], append=True)


def _records(path: Path, n: int) -> None:
    store = RecordStore(path)
    try:
        store.put_sync(_record(n))
    finally:
        store.close()


WRITERS: dict[str, Callable[[Path, int], None]] = {
    "metrics": _metrics,
    "scenarios": _scenarios,
    "saved-groups": _groups,
    "completion-records": _records,
}


@pytest.mark.parametrize("writer", WRITERS.values(), ids=WRITERS.keys())
def test_every_log_cuts_a_torn_line_and_stays_whole_and_private(
    tmp_path: Path, writer: Callable[[Path, int], None]
) -> None:
    path = tmp_path / "log.jsonl"
    writer(path, 1)
    with path.open("ab") as handle:  # what a crash mid-append leaves
        handle.write(TORN)
    writer(path, 2)
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and "half" not in text
    assert all(isinstance(json.loads(line), dict) for line in text.splitlines())
    assert stat.S_IMODE(path.stat().st_mode) == PRIVATE_FILE_MODE


def test_the_readers_see_both_records_after_the_cut(tmp_path: Path) -> None:
    for name, writer in WRITERS.items():
        path = tmp_path / f"{name}.jsonl"
        writer(path, 1)
        with path.open("ab") as handle:
            handle.write(TORN)
        writer(path, 2)
    assert [row["step"] for row in MetricsHistory(tmp_path / "metrics.jsonl").rows()] == [1, 2]
    assert [s.task for s in load_scenarios(tmp_path / "scenarios.jsonl")] == ["add up the numbers 1", "add up the numbers 2"]
    assert [g.trajectories[0].reward for g in load_groups(tmp_path / "saved-groups.jsonl")] == [1.0, 2.0]
    store = RecordStore(tmp_path / "completion-records.jsonl")
    assert len(store) == 2 and store.get("chatcmpl-2") is not None
    store.close()


def test_a_cassette_appends_through_the_same_rule(tmp_path: Path) -> None:
    """A cassette opened to record appends with ``append_durably`` (a torn cassette is refused when
    it is opened, naming the line: tests/mcp/test_cassette.py)."""
    path = tmp_path / "calls.jsonl"

    async def record(n: int) -> None:
        cassette = Cassette(path, mode="record_new")  # created if missing, else appended to
        await cassette.record_tools(f"server-{n}", [{"name": "add", "inputSchema": {"type": "object"}}])

    asyncio.run(record(1))
    asyncio.run(record(2))
    assert stat.S_IMODE(path.stat().st_mode) == PRIVATE_FILE_MODE
    cassette = Cassette(path)
    assert cassette.tools("server-1") and cassette.tools("server-2")
