"""What RULER's deduplication saves, and how many judge calls a group costs.

1. Judge prompt tokens for one group whose trajectories share a long prefix (a system
   prompt with tool documentation and the task), some of them identical: the request
   as sent (shared prefix once, identical trajectories once) against the same group
   written out in full for every trajectory. Tokens are counted with the bundled
   model's tokenizer and chat template, i.e. what our backend would read as the judge.
2. Judge calls per group, counted on the requests a scripted OpenAI-compatible judge
   server on 127.0.0.1 receives (``tests/helpers/judge_server.py``): a first scoring pass,
   a pass with one malformed answer per group (retried), and a re-score (cache).

Not part of the test suite's pass/fail. Usage: ``./dev bench ruler [--group-size 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from pathlib import Path

from langchain_openai import ChatOpenAI

import art_adapters as aa
from art_adapters.ruler import DEFAULT_RUBRIC, build_request

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.helpers
from tests.helpers.judge_server import JudgeServer, good_answer

TOOL_DOC = (
    "Tool `{name}`: {what}. Arguments: a JSON object with the fields listed below. Always check the "
    "result before answering; if the tool reports an error, explain it and try once more with fixed "
    'arguments. Never invent results. Example: <tool_call>{{"name": "{name}", "arguments": '
    '{{"x": 1}}}}</tool_call>\n'
)
TOOLS = [
    ("add", "adds two numbers"),
    ("multiply", "multiplies two numbers"),
    ("lookup", "finds a note by title"),
    ("search", "searches the notes"),
    ("convert", "converts units"),
    ("calendar", "lists events"),
]


def long_prefix_group(size: int, duplicates: int) -> aa.TrajectoryGroup:
    """``size`` trajectories sharing a ~1,500-token prefix; the last ``duplicates`` repeat the first."""
    system = (
        "You are an assistant with tools.\n" + "".join(TOOL_DOC.format(name=n, what=w) for n, w in TOOLS) * 3
    )
    user = "A customer asks: what is 17 multiplied by 23, and is there a note titled 'budget'? Answer both."
    trajectories = []
    for index in range(size):
        k = 0 if index >= size - duplicates else index
        call = aa.ToolCall(
            id=f"c{k}", function={"name": "multiply", "arguments": f'{{"a": 17, "b": {23 + k % 3}}}'}
        )
        trajectories.append(
            aa.Trajectory(
                messages=[
                    aa.Message(role="system", content=system),
                    aa.Message(role="user", content=user),
                    aa.Message(role="assistant", tool_calls=[call]),
                    aa.Message(
                        role="tool", tool_call_id=f"c{k}", name="multiply", content=str(17 * (23 + k % 3))
                    ),
                    aa.Message(
                        role="assistant",
                        content=f"17 x 23 = {17 * (23 + k % 3)}; attempt {k} found no budget note.",
                    ),
                ]
            )
        )
    return aa.TrajectoryGroup(trajectories=trajectories)


def count_tokens(messages: list[dict[str, str]]) -> int:
    """Prompt tokens of ``messages`` under the bundled model's chat template."""
    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path

    global _TOKENIZER
    if _TOKENIZER is None:
        _TOKENIZER = load_tokenizer(resolve_model_path("smollm2-135m-instruct"))
    text = _TOKENIZER.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(_TOKENIZER(text, add_special_tokens=False, verbose=False)["input_ids"])


_TOKENIZER = None


async def judge_calls(groups: int, size: int) -> dict[str, float]:
    """Judge requests per group: first pass, with one malformed answer each, and cached."""
    with JudgeServer() as server, tempfile.TemporaryDirectory() as cache:
        judge = ChatOpenAI(base_url=server.url, api_key="bench", model="scripted-judge", max_retries=0)
        batch = [long_prefix_group(size, duplicates=2) for _ in range(groups)]
        for g, group in enumerate(batch):  # distinct content per group, so no cross-group cache hits
            for trajectory in group.trajectories:
                trajectory.messages[1].content = f"{trajectory.messages[1].content} (customer {g})"
        server.reset()
        await aa.ruler_score_groups(batch, judge=judge, cache=cache)
        first = len(server.requests) / groups
        server.reset()
        await aa.ruler_score_groups(batch, judge=judge, cache=cache)
        cached = len(server.requests) / groups
        # Every first attempt gets a malformed answer; the retry (which carries feedback) a good one.
        server.reset(
            default=lambda body: good_answer(body) if len(body["messages"]) > 2 else {"content": "not json"}
        )
        await aa.ruler_score_groups(batch, judge=judge, cache=False)
        with_retry = len(server.requests) / groups
    return {"first": first, "cached": cached, "one_bad_answer": with_retry}


def main() -> None:
    """Print the token ratio and calls per group."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--duplicates", type=int, default=2, help="trajectories identical to the first")
    parser.add_argument("--groups", type=int, default=6)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the scripted bad answers log retries at WARNING

    group = long_prefix_group(args.group_size, args.duplicates)
    deduped = build_request(group, DEFAULT_RUBRIC, dedup=True)
    full = build_request(group, DEFAULT_RUBRIC, dedup=False)
    with_dedup, without = count_tokens(deduped.messages), count_tokens(full.messages)
    print(
        f"group: {args.group_size} trajectories, {args.duplicates} identical to another, "
        f"{deduped.prefix_messages} shared prefix messages"
    )
    print(f"judge prompt tokens without dedup: {without}")
    print(
        f"judge prompt tokens with dedup:    {with_dedup} ({len(deduped.labels)} distinct trajectories sent)"
    )
    print(f"ratio without/with: {without / with_dedup:.2f}x")

    calls = asyncio.run(judge_calls(args.groups, args.group_size))
    print(
        f"judge calls per group: first scoring {calls['first']:.2f}, "
        f"with one malformed answer {calls['one_bad_answer']:.2f}, re-score (cache) {calls['cached']:.2f}"
    )


if __name__ == "__main__":
    main()
