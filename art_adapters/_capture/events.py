"""Names of the LangChain custom events that tools dispatch for capture to pick up."""

from __future__ import annotations

__all__ = ["TOOL_RECORD_EVENT"]

#: A tool that knows more about its own call than LangChain does (an MCP ``tools/call``:
#: server, session, ``isError``) dispatches this custom event with a
#: :class:`~art_adapters._trajectory.ToolCallRecord` as JSON; the trajectory callback
#: handler puts it in place of the tool run's own record.
TOOL_RECORD_EVENT = "art_adapters.tool_record"
