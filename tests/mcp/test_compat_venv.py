"""Users of langchain-mcp-adapters (which pins ``mcp<2``) are captured too, and mcp_tools works on mcp 1.x.

mcp 1.x cannot share ``.venv`` with mcp 2.x, so this test builds (once; it is cached)
a second venv, ``.venv-compat``, with ``pip install -e . langchain-mcp-adapters``, and
runs ``compat_script.py`` there. The venv is rebuilt when its probe import fails (e.g.
after a dependency was added). Building it needs the package index; when that fails
the test is skipped with pip's own message, never silently passed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.side_venv import ROOT, ensure_side_venv

VENV = ROOT / ".venv-compat"
PROBE = "import langchain_mcp_adapters, mcp, art_adapters, mcp_tools, langgraph.prebuilt; assert mcp.__name__"


def _probe(python: Path) -> bool:
    if not python.exists():
        return False
    done = subprocess.run([str(python), "-c", PROBE], capture_output=True, timeout=120, cwd=ROOT, check=False)
    return done.returncode == 0


@pytest.fixture(scope="module")
def compat_python() -> Path:
    """The interpreter of ``.venv-compat`` (mcp 1.x + langchain-mcp-adapters), built on first use."""
    python, note = ensure_side_venv(VENV.name, ["-e", str(ROOT), "langchain-mcp-adapters"], usable=_probe)
    if python is None:
        pytest.skip(note)
    if not _probe(python):
        pytest.skip(f"{VENV.name} was built but cannot import {PROBE!r}")
    return python


def test_langchain_mcp_adapters_tools_and_mcp_tools_on_mcp_1x(compat_python: Path) -> None:
    done = subprocess.run(
        [str(compat_python), str(Path(__file__).with_name("compat_script.py"))],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mcp_version"].startswith("1.")

    adapters = result["adapters"]
    tool_messages = [m for m in adapters["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_add_2_3_4", "5"),
        ("call_mul_2_3_4", "12"),
    ]
    records = sorted(
        (r["name"], r["call_id"], r["arguments"], r["result"], r["is_error"])
        for r in adapters["tool_records"]
    )
    assert records == [
        ("add", "call_add_2_3_4", {"a": 2, "b": 3}, "5", False),
        ("multiply", "call_mul_2_3_4", {"a": 3, "b": 4}, "12", False),
    ]
    assert adapters["messages"][-1]["content"] == "The results are 5 and 12."

    ours = result["ours"]
    create, search = ours["tool_records"]
    assert (create["source"], create["server"], create["result"]) == ("mcp", "notes", "created note #13")
    assert create["session_id"] == search["session_id"] and "#13 compat" in search["result"]
    assert result["http_isolated"] is True


async def test_a_genuine_mcp_1x_server_speaks_2025_11_25_to_our_clients_on_mcp_2x(compat_python: Path) -> None:
    """Not an emulation: the calculator server run by mcp 1.30 (newest protocol 2025-11-25, no
    ``server/discover``), called over stdio by mcp 2.x's SDK, ``mcp_tools`` and ``langchain.mcp``."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    import mcp_tools

    server = [str(compat_python), "-m", "mcp_tools.servers.calculator"]
    params = StdioServerParameters(command=server[0], args=server[1:], cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        assert (await session.initialize()).protocol_version == "2025-11-25"  # the handshake era

    tools = {t.name: t for t in await mcp_tools.load_tools(" ".join(server))}
    async with mcp_tools.rollout() as scope:
        assert await tools["add"].ainvoke({"a": 2, "b": 3}) == "5"
        assert scope.sessions and all(s.session_ids for s in scope.sessions)  # a handshake session per rollout

    adapter_module = pytest.importorskip("langchain.mcp", reason="langchain.mcp needs fastmcp")
    transports = pytest.importorskip("fastmcp.client.transports")
    transport = transports.StdioTransport(command=server[0], args=server[1:], keep_alive=False)
    async with adapter_module.MCPAdapter(transport) as adapter:  # probes server/discover, then falls back
        add = next(t for t in await adapter.list_tools() if t.name == "add")
        content = await add.ainvoke({"a": 2, "b": 3})
    assert [part["text"] for part in content] == ["5"]
