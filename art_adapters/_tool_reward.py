"""A reward from what the tools did: the first call parsed, the calls ran, the answer used their results.

:func:`tool_use_reward` needs no judge, so it gives a training signal where a small judge scores a
whole group the same; ``combined_scorer(judge, reward=tool_use_reward)`` mixes it with RULER.
"""

from __future__ import annotations

import re
from typing import Any

from ._trajectory import Message, Trajectory

__all__ = ["TOOL_REWARD_WEIGHTS", "tool_use_reward"]

#: The parts of :func:`tool_use_reward` and their weights (they sum to 1).
TOOL_REWARD_WEIGHTS = {"first_call_parsed": 0.2, "tool_calls_ok": 0.5, "answer_grounded": 0.3}

_TOKEN = re.compile(r"[^\W_][\w.:/-]*[^\W_]|\d")
#: Frequent words that show nothing about where an answer's content came from.
_COMMON = frozenset(
    "the and for are was were this that with from have has had not but you your all any can its into "
    "been will would there their they them then than what when which who how also only just more most "
    "some such very here note notes result results tool tools error none true false null".split()
)


def _text(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _tokens(text: str) -> set[str]:
    """Words of 4+ characters and every number, lower-cased, without :data:`_COMMON` ones."""
    found = (t.casefold().rstrip(".:") for t in _TOKEN.findall(text))
    return {t for t in found if (len(t) >= 4 or any(c.isdigit() for c in t)) and t not in _COMMON}


def _failed(record: Any) -> bool:
    return bool(record.is_error or record.error)


def tool_use_reward(trajectory: Trajectory, scenario: Any = None) -> float:
    """A reward in [0, 1] from what the rollout's tools did, for ``verifiable_scorer``/``combined_scorer``.

    The weighted sum (:data:`TOOL_REWARD_WEIGHTS`) of three parts, each also set in
    ``trajectory.metrics`` (so the metrics rows carry their means):

    - ``first_call_parsed`` (0.2): the model's first turn is a tool call that parsed (a call
      cut off by the token limit, or plain text, is not).
    - ``tool_calls_ok`` (0.5): the share of the rollout's tool calls that ran without error
      (``is_error`` or ``error`` on the record; MCP tools also mark a plain-text error result,
      see :func:`mcp_tools.load_tools`); 0 without calls.
    - ``answer_grounded`` (0.3): the final answer (the last assistant turn with no tool call)
      repeats something a successful call returned: a number, or a word of four or more
      characters, that is in a result and not already in the task, the system prompt or a
      list of common words.

    ``scenario`` is not used (the signature is the verifiable reward's).
    """
    del scenario
    assistant = [m for m in trajectory.messages if m.role == "assistant"]
    parsed = 1.0 if assistant and assistant[0].tool_calls else 0.0
    records = trajectory.tool_records
    ok = [r for r in records if not _failed(r)]
    calls_ok = len(ok) / len(records) if records else 0.0
    final = assistant[-1] if assistant and not assistant[-1].tool_calls else None
    grounded = 0.0
    if final is not None and ok:
        given = set().union(*(_tokens(_text(m)) for m in trajectory.messages if m.role in ("system", "user")))
        returned = set().union(*(_tokens(r.result or "") for r in ok)) - given
        grounded = 1.0 if returned & _tokens(_text(final)) else 0.0
    parts = {"first_call_parsed": parsed, "tool_calls_ok": calls_ok, "answer_grounded": grounded}
    trajectory.metrics.update(parts)
    return sum(TOOL_REWARD_WEIGHTS[name] * value for name, value in parts.items())
