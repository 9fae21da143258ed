"""Judges that score by what they read, for :class:`tests.helpers.judge_server.JudgeServer`.

Each function here is a server ``default`` (``body -> {"content": answer}``): it reads the request's
``<trajectory id="tN">`` blocks (the part of each trajectory after the shared ``<context>``) and
scores every block with a rule of its own, as a real judge following (or gaming) a rubric would:

* :func:`length_loving`: longer answers score higher (a judge the policy can game with padding);
* :func:`closest_number`: the answer nearest the sum asked for in ``What is A + B?`` scores highest
  (a judge that agrees with the verifiable check :func:`sum_reward`);
* :func:`judge_dimensions`: one rule per rubric dimension (``RulerConfig.dimensions``), answered as
  the ``dimensions`` object of each entry.

The verifiable rewards the tests compare them with are here too, so both sides read the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.helpers.judge_server import scores

__all__ = [
    "BREVITY_RULE",
    "LENGTH_RULE",
    "SUM_RULE",
    "answer_number",
    "closest_number",
    "judge_by",
    "judge_dimensions",
    "length_loving",
    "sum_reward",
    "trajectory_blocks",
]

_BLOCK = re.compile(r'<trajectory id="(t\d+)">(.*?)</trajectory>', flags=re.S)
_QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")


def trajectory_blocks(body: dict[str, Any]) -> dict[str, str]:
    """A judge request's trajectory ids -> the text of their ``<trajectory>`` blocks, in order."""
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    return dict(_BLOCK.findall(text))


def _assistant_text(block: str) -> str:
    """The text of a block's assistant messages (what follows each ``### assistant`` header)."""
    parts = re.split(r"^### ", block, flags=re.M)
    return "\n".join(p.partition("\n")[2] for p in parts if p.startswith("assistant"))


def judge_by(rule: Callable[[dict[str, Any], str], float]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A server answer scoring each trajectory ``rule(body, assistant_text)`` (clamped to [0, 1])."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        blocks = trajectory_blocks(body)
        pairs = [(label, max(0.0, min(1.0, rule(body, _assistant_text(b))))) for label, b in blocks.items()]
        return {"content": scores(pairs, explanation="scored by rule")}

    return answer


def _length(body: dict[str, Any], text: str) -> float:
    return len(text.strip()) / 60.0


#: Scores each trajectory by its assistant text's length: 60 characters or more score 1.
length_loving = judge_by(_length)


def answer_number(text: str) -> int | None:
    """The first integer in ``text``, or ``None``."""
    found = re.search(r"-?\d+", text)
    return int(found.group()) if found else None


def sum_reward(question: str, answer: str) -> float:
    """The verifiable reward of ``answer`` to ``What is A + B?``: ``1 / (1 + |number - (A + B)|)``
    (0 without a number)."""
    a, b = map(int, _QUESTION.search(question).groups())  # type: ignore[union-attr]
    number = answer_number(answer)
    return 0.0 if number is None else 1.0 / (1.0 + abs(number - (a + b)))


def _closest(body: dict[str, Any], text: str) -> float:
    question = "\n".join(str(m.get("content")) for m in body["messages"])
    return sum_reward(question, text)


#: Scores each trajectory as :func:`sum_reward` does: a judge that agrees with the verifiable check.
closest_number = judge_by(_closest)


def judge_dimensions(
    rules: dict[str, Callable[[dict[str, Any], str], float]],
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A server answer for rubric dimensions: each entry's ``dimensions`` is ``rule(body, text)`` per name."""

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        entries = []
        for label, block in trajectory_blocks(body).items():
            text = _assistant_text(block)
            by_name = {name: max(0.0, min(1.0, rule(body, text))) for name, rule in rules.items()}
            entries.append({"trajectory_id": label, "explanation": "by dimension", "dimensions": by_name})
        return {"content": json.dumps({"scores": entries})}

    return answer


#: The rules of :func:`length_loving` and :func:`closest_number`, for :func:`judge_dimensions`.
LENGTH_RULE, SUM_RULE = _length, _closest


def _brevity(body: dict[str, Any], text: str) -> float:
    return 1.0 / (1.0 + len(text.strip()))


#: Scores each trajectory as tests/loop's verifiable brevity reward does: ``1 / (1 + characters)`` of its
#: reply (a judge that agrees with that check; beside :data:`LENGTH_RULE`, two judges that disagree).
BREVITY_RULE = _brevity
