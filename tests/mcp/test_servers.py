"""The bundled servers, started for real over stdio and streamable HTTP."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from mcp_tools import McpSession
from mcp_tools.servers import server_command
from mcp_tools.servers.notes import NoteError, NotesStore, load_seed


def _text(result: dict) -> str:
    return "\n".join(block["text"] for block in result["content"] if block["type"] == "text")


async def test_calculator_stdio_arithmetic_and_tool_errors() -> None:
    async with McpSession(server_command("calculator")) as session:
        assert _text(await session.call_tool("add", {"a": 2, "b": 3})) == "5"
        assert _text(await session.call_tool("subtract", {"a": 2, "b": 3.5})) == "-1.5"
        assert _text(await session.call_tool("multiply", {"a": 6, "b": 7})) == "42"
        assert _text(await session.call_tool("divide", {"a": 1, "b": 4})) == "0.25"
        assert _text(await session.call_tool("power", {"base": 2, "exponent": 10})) == "1024"
        assert _text(await session.call_tool("sqrt", {"x": 2})) == "1.41421356237"
        by_zero = await session.call_tool("divide", {"a": 1, "b": 0})
        assert by_zero["isError"] is True
        assert "by zero" in _text(by_zero)
        negative = await session.call_tool("sqrt", {"x": -4})
        assert negative["isError"] is True and "negative" in _text(negative)
        overflow = await session.call_tool("power", {"base": 10, "exponent": 1000})
        assert overflow["isError"] is True and "finite" in _text(overflow)
        tools = {t["name"] for t in (await session.list_tools())["calculator"]}
        assert tools == {
            "add",
            "subtract",
            "multiply",
            "divide",
            "power",
            "sqrt",
        }  # no debug tools by default


async def test_debug_tools_by_flag_and_by_env() -> None:
    async with McpSession(server_command("calculator", "--debug-tools")) as session:
        assert {"crash", "sleep"} <= {t["name"] for t in (await session.list_tools())["calculator"]}
        assert _text(await session.call_tool("sleep", {"seconds": 0.01})) == "slept 0.01s"
    env_server = {
        "command": server_command("calculator")[0],
        "args": server_command("calculator")[1:],
        "env": {"MCP_TOOLS_DEBUG_TOOLS": "1"},
    }
    async with McpSession(env_server, name="calc") as session:
        assert "crash" in {t["name"] for t in (await session.list_tools())["calc"]}


async def test_notes_stdio_seed_and_crud() -> None:
    async with McpSession(server_command("notes")) as session:
        listing = _text(await session.call_tool("list_notes", {}))
        assert len(listing.splitlines()) == len(load_seed()) == 12
        work = _text(await session.call_tool("list_notes", {"tag": "meetings"}))
        assert "Q3 planning meeting" in work and "Grocery" not in work
        found = _text(await session.call_tool("search_notes", {"query": "lisbon hotel"}))
        assert found.startswith("#3 Lisbon trip")
        assert "LX-88412" in _text(await session.call_tool("read_note", {"note_id": 3}))
        created = _text(
            await session.call_tool(
                "create_note", {"title": "Call plumber", "body": "Leaky tap", "tags": ["home"]}
            )
        )
        assert created == "created note #13"
        await session.call_tool("append_to_note", {"note_id": 13, "text": "Tuesday 9am works"})
        note = _text(await session.call_tool("read_note", {"note_id": 13}))
        assert "Leaky tap\nTuesday 9am works" in note and "[home]" in note
        assert "deleted note #13" in _text(await session.call_tool("delete_note", {"note_id": 13}))
        missing = await session.call_tool("read_note", {"note_id": 13})
        assert missing["isError"] is True and "list_notes or search_notes" in _text(missing)


def test_notes_store_errors_say_what_to_do() -> None:
    store = NotesStore.from_seed(load_seed())
    with pytest.raises(NoteError, match="no note with id 99"):
        store.read(99)
    with pytest.raises(NoteError, match="query is empty"):
        store.search("   ")
    with pytest.raises(NoteError, match="non-empty title"):
        store.create(" ", "body")
    assert store.search("zebra") == "no notes match 'zebra'"


def test_load_seed_rejects_a_malformed_file(tmp_path: Path) -> None:
    bad = tmp_path / "seed.json"
    bad.write_text(json.dumps({"items": []}))
    with pytest.raises(ValueError, match="must hold"):
        load_seed(bad)


async def test_notes_http_sessions_are_isolated_and_port_file_written(
    tmp_path: Path, start_http_server
) -> None:
    port_file = tmp_path / "port"
    with start_http_server("notes", port_file=port_file) as url:
        assert url.endswith(f":{port_file.read_text()}/mcp")
        async with McpSession(url) as first, McpSession(url) as second:
            assert first.session_ids != second.session_ids
            await first.call_tool("create_note", {"title": "only in first", "body": "x"})
            assert "only in first" in _text(await first.call_tool("search_notes", {"query": "only in first"}))
            assert _text(await second.call_tool("search_notes", {"query": "only in first"})).startswith(
                "no notes"
            )


async def test_notes_db_is_shared_and_persistent(tmp_path: Path, start_http_server) -> None:
    db = tmp_path / "notes.sqlite"
    with start_http_server("notes", "--db", str(db)) as url:
        async with McpSession(url) as first, McpSession(url) as second:
            await first.call_tool("create_note", {"title": "shared note", "body": "x"})
            assert "shared note" in _text(await second.call_tool("search_notes", {"query": "shared note"}))
    rows = sqlite3.connect(db).execute("SELECT COUNT(*) FROM notes").fetchone()[0]
    assert rows == 13  # seeded 12 + 1, still on disk after the server stopped


async def test_notes_seed_copy_leaves_the_template_untouched(tmp_path: Path) -> None:
    db = tmp_path / "template.sqlite"
    for _ in range(2):  # each process/session starts from the template
        async with McpSession(server_command("notes", "--db", str(db), "--seed-copy")) as session:
            assert (
                _text(await session.call_tool("create_note", {"title": "scratch", "body": "x"}))
                == "created note #13"
            )
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 12


def test_seed_copy_without_db_is_a_usage_error() -> None:
    done = subprocess.run(
        server_command("notes", "--seed-copy"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "--seed-copy needs --db" in done.stderr
