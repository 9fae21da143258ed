"""The topic check of generated scenarios: a task must share a content word with the tools or their data.

A weak writer model produces tasks about nothing ("The 4th easy task"), about something else
("Implement a custom error handler") or in no language; none of them teaches the tools.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from mcp_tools._answers import name_words

__all__ = ["DATA_WORDS", "Topic", "on_topic", "topic_words"]

#: Words that say nothing about a task's topic: function words and the verbs of any request.
_STOP = frozenset(
    """a about above after again all also am an and any are as at be been before being below between both but
    by can could did do does doing done down during each either etc even every few for from further get gets
    give given go going good had has have having he her here hers him his how i if in into is it its itself
    just let like make me more most much must my need needs new no nor not now of off on once one only or
    other our ours out over own please same she should show so some such tell than that the their them then
    there these they this those through to too two under until up use used using very want was way we were
    what when where which while who whom why will with would yes yet you your yours task tasks easy hard
    simple example something thing things user users help info information data value values number
    numbers result results return returns string optional default given id ids name names create write
    make generate implement design build explain word words text line lines first last end whole argument
    arguments containing existing optionally optional limit""".split()
)
#: An operator between two numbers reads as the word of its operation ("17 + 25": add).
_OPERATORS = {"+": "add", "-": "subtract", "*": "multiply", "x": "multiply", "/": "divide", "^": "power"}
_ARITHMETIC = re.compile(r"\d\s*([-+*x/^])\s*\d")
#: Arithmetic words that name an operation by another word ("250 plus 17.5": add).
_SYNONYMS = {"plus": "add", "minus": "subtract", "times": "multiply", "over": "divide"}
#: Shared words with the resources' text (the server's data) that put a task on topic.
DATA_WORDS = 2


def _content(text: str) -> set[str]:
    """The lower-case content words of *text* (3+ letters, not in :data:`_STOP`), identifiers split."""
    return {w for w in name_words(text) if len(w) >= 3 and w.isalpha() and w not in _STOP}


def _schema_text(schema: Any) -> Iterable[str]:
    """Property names, descriptions, titles and string enum values anywhere in a JSON schema."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, Mapping):
            for key, value in node.items():
                if key == "properties" and isinstance(value, Mapping):
                    yield from (str(name) for name in value)
                if key in ("description", "title") and isinstance(value, str):
                    yield value
                elif key == "enum" and isinstance(value, list):
                    yield from (v for v in value if isinstance(v, str))
                else:
                    stack.append(value)


class Topic(NamedTuple):
    """What an on-topic task talks about: the tools' words, and the words of the server's data."""

    tools: frozenset[str]
    data: frozenset[str] = frozenset()


def topic_words(specs: Sequence[Mapping[str, Any]], resources: Iterable[Mapping[str, Any]] = ()) -> Topic:
    """The content words of the tools (names, descriptions, parameter names and descriptions, and the
    *resources*' names and descriptions), and apart those of the resources' text (the server's data)."""
    tools: set[str] = set()
    data: set[str] = set()
    for spec in specs:
        tools |= _content(str(spec.get("name", "")))
        tools |= _content(str(spec.get("description") or ""))
        for text in _schema_text(spec.get("parameters") or spec.get("inputSchema") or {}):
            tools |= _content(text)
    for resource in resources:
        for key in ("name", "description"):
            tools |= _content(str(resource.get(key) or ""))
        data |= _content(str(resource.get("text") or ""))
    return Topic(frozenset(tools), frozenset(data))


def _related(word: str, known: str) -> bool:
    """Same word, one a prefix of the other with 4+ letters (note/notes, time/timezone), or a common
    start of 6+ letters (multiplied/multiply)."""
    if word == known:
        return True
    short, long = (word, known) if len(word) <= len(known) else (known, word)
    if len(short) >= 4 and long.startswith(short):
        return True
    return len(short) >= 6 and short[:6] == long[:6]


def _shared(words: set[str], known: frozenset[str]) -> int:
    return sum(1 for word in words if any(_related(word, k) for k in known))


def on_topic(task: str, topic: Topic) -> bool:
    """Whether *task* is about the tools: it shares a content word with their words, or
    :data:`DATA_WORDS` (2) with the server's data (a note's body has words on every topic, so one
    shared word with it proves little).

    Words are compared after splitting identifiers (``read_note`` -> read, note) and dropping
    function words and generic request words ("show", "tell", "task", "easy", "create"...); an
    operator between numbers, or "plus", "minus", "times", reads as its operation ("17 + 25": add).
    Two words match when equal, when the shorter (4+ letters) begins the longer ("notes" and
    "note", "timezone" and "time"), or when they start with the same 6 letters ("multiplied" and
    "multiply"). A topic without words accepts everything.
    """
    if not topic.tools and not topic.data:
        return True
    words = _content(re.sub(r"[`'\"]", " ", task))
    words |= {_OPERATORS[op] for op in _ARITHMETIC.findall(task)}
    words |= {_SYNONYMS[w] for w in list(words) if w in _SYNONYMS}
    return _shared(words, topic.tools) > 0 or _shared(words, topic.data) >= DATA_WORDS
