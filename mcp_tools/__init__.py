"""MCP middleware: MCP servers as LangChain tools whose every ``tools/call`` is captured.

::

    import mcp_tools

    tools = await mcp_tools.load_tools("python -m mcp_tools.servers.notes")
    async with mcp_tools.rollout():               # one MCP session for this rollout
        await graph.ainvoke(inputs, config={"callbacks": [handler]})

Each call is recorded in the trajectory (a LangChain custom event carrying a
``ToolCallRecord``) and traced as an OTel span ``tools/call <tool>``. A server that
crashes or hangs raises :class:`art_adapters.ToolServerError` within the call
timeout. Works with mcp 1.x and 2.x.

A server that keeps its data in a file or folder gets a fresh copy per rollout with
``StdioServer(state=[StateCopy(source=..., env=...)])``, ``{state:PATH}`` in its
command, or :func:`with_state` (see :mod:`mcp_tools._isolation`).

For MCP-RL, :func:`generate_scenarios` has a chat model write tasks that need a
server's tools, kept as :class:`Scenario` records in an editable JSONL file
(:func:`save_scenarios`, :func:`load_scenarios`) and split with :func:`split_scenarios`.
Bundled servers live in :mod:`mcp_tools.servers`.
"""

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
