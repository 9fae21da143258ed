"""An oracle RULER judge for the demo's task, for :class:`tests.helpers.judge_server.JudgeServer`.

It reads each ``<trajectory>`` block of a judge request as a judge would, and scores it by the demo's
own check (``0.5`` for an ``add`` call of the question's two numbers, ``0.5`` for a final answer whose
last number is their sum): a stand-in for a strong judge model. With ``swap`` it shuffles the scores
of that share of its requests (a noisy judge whose ranking of a group is wrong that often).
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Callable
from typing import Any

from tests.helpers.judge_server import scores
from tests.helpers.scripted_judges import trajectory_blocks

__all__ = ["demo_oracle", "oracle_score"]

_QUESTION = re.compile(r"What is (-?\d+) \+ (-?\d+)\?")
_CALL = re.compile(r"^tool_call add\((.*)\)$", flags=re.M)


def oracle_score(question: tuple[int, int], block: str) -> float:
    """The demo's check on one rendered trajectory: 0.5 for the right ``add`` call, 0.5 for the sum."""
    want = {float(question[0]), float(question[1])}
    called = False
    for arguments in _CALL.findall(block):
        try:
            args = json.loads(arguments)
            called = called or {float(args.get("a")), float(args.get("b"))} == want
        except (ValueError, TypeError, AttributeError):
            continue
    sections = [s for s in re.split(r"^### ", block, flags=re.M) if s.strip()]
    last = sections[-1] if sections else ""
    answered = False
    if last.startswith("assistant") and "tool_call " not in last:
        numbers = re.findall(r"-?\d+(?:\.\d+)?", last.partition("\n")[2])
        answered = bool(numbers) and float(numbers[-1]) == float(sum(question))
    return 0.5 * called + 0.5 * answered


def demo_oracle(swap: float = 0.0, seed: int = 0) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A server answer scoring every trajectory by :func:`oracle_score`; a ``swap`` share of the
    requests (drawn with ``seed``) get their scores shuffled among the group's trajectories."""
    rng, lock = random.Random(seed), threading.Lock()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        text = "\n".join(str(m.get("content")) for m in body["messages"])
        context = text.partition('<trajectory id="')[0]
        found = _QUESTION.findall(context)
        if not found:
            raise ValueError("the judge request names no 'What is A + B?' question")
        question = (int(found[-1][0]), int(found[-1][1]))  # the last: the worked example comes first
        blocks = trajectory_blocks(body)
        values = [oracle_score(question, block) for block in blocks.values()]
        with lock:
            if rng.random() < swap:
                rng.shuffle(values)
        return {"content": scores(list(zip(blocks, values, strict=True)), explanation="the demo's check")}

    return answer
