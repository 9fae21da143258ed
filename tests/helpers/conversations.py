"""What two captures of one run must agree on: the conversation, without ids, timings or provenance."""

from __future__ import annotations

from typing import Any

from art_adapters import Trajectory

__all__ = ["conversation"]


def conversation(trajectory: Trajectory, *, errors: bool = False, usage: bool = False) -> dict[str, Any]:
    """Messages, tools, extra histories and tool records (sorted ``(call id, name, arguments, result)``).

    ``errors`` adds each tool record's ``is_error`` and the run's ``error``; ``usage`` adds the
    token counts of its metrics (``*tokens``).
    """
    records = [(r.call_id, r.name, str(r.arguments), r.result) for r in trajectory.tool_records]
    view: dict[str, Any] = {
        "messages": [m.model_dump(exclude_none=True) for m in trajectory.messages],
        "tools": trajectory.tools,
        "histories": [
            [m.model_dump(exclude_none=True) for m in h.messages] for h in trajectory.additional_histories
        ],
        "tool_records": sorted(records),
    }
    if errors:
        flagged = [(*record, r.is_error) for record, r in zip(records, trajectory.tool_records, strict=True)]
        view |= {"tool_records": sorted(flagged), "error": trajectory.error}
    if usage:
        view["usage"] = {k: v for k, v in trajectory.metrics.items() if k.endswith("tokens")}
    return view
