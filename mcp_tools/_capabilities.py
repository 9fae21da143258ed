"""Warnings about tools this client cannot serve well: ones that need MCP capabilities it lacks, and
ones that reach an open world (the web, outside services) with arguments the model picks."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["needs_tasks", "open_world", "warn_capabilities"]

logger = logging.getLogger("mcp_tools._client")  # load_tools' logger: its warnings, in one place


def needs_tasks(tools: list[dict[str, Any]]) -> list[str]:
    """The tools whose ``execution.taskSupport`` is ``"required"``: callable only as MCP tasks."""
    return [t["name"] for t in tools if (t.get("execution") or {}).get("taskSupport") == "required"]


def open_world(tools: list[dict[str, Any]]) -> list[str]:
    """The tools annotated ``openWorldHint: true`` (a tool without the annotation is not counted)."""
    return [t["name"] for t in tools if (t.get("annotations") or {}).get("openWorldHint") is True]


def warn_capabilities(listing: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    """Log (and return) one warning per server for tools that need MCP tasks, which this client does
    not support (every call fails), and one for tools annotated as open-world."""
    lines = []
    for server, tools in listing.items():
        tasks = needs_tasks(tools)
        if tasks:
            lines.append(
                f"MCP server {server!r}: {', '.join(tasks)} can only be called as an MCP task "
                "(execution.taskSupport 'required'), which this client does not support: every call "
                "will fail; leave them out (train-mcp --exclude-tools NAME)"
            )
        reaching = open_world(tools)
        if reaching:
            lines.append(
                f"MCP server {server!r}: {', '.join(reaching)} reach an open world by their annotations "
                "(openWorldHint: the web or outside services), with arguments such as URLs the model "
                "picks: rollouts depend on what is out there and may reach anything; leave them out "
                "unless that is what you train (train-mcp --exclude-tools NAME)"
            )
    for line in lines:
        logger.warning("%s", line)
    return lines
