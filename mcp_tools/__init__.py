"""MCP middleware: MCP servers as LangChain tools whose every ``tools/call`` is captured.

``tools = await mcp_tools.load_tools("python -m mcp_tools.servers.notes")``, then ``async with
mcp_tools.rollout():`` around each graph run (one MCP session per rollout). Each call lands in the
trajectory and in an OTel span, and can be recorded to and replayed from a :class:`Cassette`;
per-rollout server state (:class:`StateCopy`, :func:`with_state`), scenario writing
(:func:`generate_scenarios`) and bundled servers (:mod:`mcp_tools.servers`) are here too. Works with
mcp 1.x and 2.x.
"""

from mcp_tools._cassette import Cassette, CassetteCall, CassetteError, CassetteMissError
from mcp_tools._client import load_tools
from mcp_tools._config import HttpServer, McpClientConfig, StateCopy, StdioServer
from mcp_tools._generate import (
    PLAIN_TASK_PATTERN,
    ScenarioGenerationError,
    describe_tools,
    generate_scenarios,
)
from mcp_tools._isolation import with_state
from mcp_tools._rollout import RolloutScope, current_scope, rollout
from mcp_tools._scenarios import (
    Scenario,
    ScenarioFileError,
    load_scenarios,
    normalize_task,
    save_scenarios,
    split_scenarios,
)
from mcp_tools._session import McpSession
from mcp_tools._tools import TOOL_RECORD_EVENT, McpTool

__all__ = [
    "Cassette",
    "CassetteCall",
    "CassetteError",
    "CassetteMissError",
    "HttpServer",
    "McpClientConfig",
    "McpSession",
    "McpTool",
    "PLAIN_TASK_PATTERN",
    "RolloutScope",
    "Scenario",
    "ScenarioFileError",
    "ScenarioGenerationError",
    "StateCopy",
    "StdioServer",
    "TOOL_RECORD_EVENT",
    "current_scope",
    "describe_tools",
    "generate_scenarios",
    "load_scenarios",
    "load_tools",
    "normalize_task",
    "rollout",
    "save_scenarios",
    "split_scenarios",
    "with_state",
]
