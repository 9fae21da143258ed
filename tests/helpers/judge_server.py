"""A scripted OpenAI-compatible judge: a real HTTP server on 127.0.0.1 that records requests.

Each ``POST /v1/chat/completions`` is recorded (parsed JSON body) and answered by the
next entry of ``script`` (or ``default`` when the script is empty). An entry is a dict:

* ``{"content": "..."}``: answer with that assistant text;
* ``{"sleep": 2.0, "content": "..."}``: wait first (to trip the client's timeout);
* ``{"status": 500}``: answer with an HTTP error;

or a callable ``body -> entry``, which sees the request (used to answer by content).
:func:`good_answer` is the default: it reads the ids from the request's schema (or its
prompt) and scores them ``1, 1/2, 1/3, ...``; a per-turn request (``per_turn=True``) also
gets ``turn_scores``, one per numbered assistant turn (:func:`request_turns`).

Also used by ``bench/ruler.py``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.helpers.json_server import QuietHandler, ServedInThread

Entry = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


def request_ids(body: dict[str, Any]) -> list[str]:
    """The trajectory ids a judge request asks about (from its schema, else its prompt)."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema")
    if schema:
        return list(schema["properties"]["scores"]["items"]["properties"]["trajectory_id"]["enum"])
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    return list(dict.fromkeys(re.findall(r'<trajectory id="(t\d+)">', text)))


def request_turns(body: dict[str, Any]) -> dict[str, int]:
    """A per-turn request's trajectory ids -> their numbered assistant turns (``### assistant (turn N)``).

    Empty for a per-trajectory request.
    """
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    if "turn_scores" not in text:
        return {}
    blocks = re.findall(r'<trajectory id="(t\d+)">(.*?)</trajectory>', text, flags=re.S)
    turn = re.compile(r"^### assistant \(turn \d+\)", flags=re.M)
    return {label: len(turn.findall(block)) for label, block in blocks}


def scores(pairs: list[tuple[str, float]], explanation: str = "because") -> str:
    """A judge answer for ``(id, score)`` pairs, as JSON text."""
    return json.dumps(
        {"scores": [{"trajectory_id": i, "explanation": f"{explanation} {i}", "score": s} for i, s in pairs]}
    )


def turn_scores(entries: list[tuple[str, float, list[Any]]], explanation: str = "because") -> str:
    """A per-turn judge answer for ``(id, score, turn scores)`` entries, as JSON text."""
    return json.dumps(
        {
            "scores": [
                {"trajectory_id": i, "explanation": f"{explanation} {i}", "score": s, "turn_scores": turns}
                for i, s, turns in entries
            ]
        }
    )


def good_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A valid answer: ids in order, scored 1, 1/2, 1/3, ... (per turn too: each turn as its trajectory)."""
    labels = request_ids(body)
    turns = request_turns(body)
    if turns:
        entries = [(label, 1 / (k + 1), [1 / (k + 1)] * turns[label]) for k, label in enumerate(labels)]
        return {"content": turn_scores(entries)}
    return {"content": scores([(label, 1 / (k + 1)) for k, label in enumerate(labels)])}


class JudgeServer(ServedInThread):
    """The server; start with :meth:`start`, stop with :meth:`stop` (or use as a context manager)."""

    def __init__(self) -> None:
        self.script: list[Entry] = []
        self.default: Entry = good_answer
        self.requests: list[dict[str, Any]] = []
        self.raw_bodies: list[str] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The OpenAI base URL (``http://127.0.0.1:PORT/v1``)."""
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def reset(self, script: list[Entry] | None = None, default: Entry = good_answer) -> None:
        """Forget recorded requests and load a new script."""
        with self._lock:
            self.script = list(script or [])
            self.default = default
            self.requests.clear()
            self.raw_bodies.clear()

    def _next(self, body: dict[str, Any], raw: str) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            self.raw_bodies.append(raw)
            entry = self.script.pop(0) if self.script else self.default
        return entry(body) if callable(entry) else entry

    def start(self) -> JudgeServer:
        """Listen on a free port on 127.0.0.1, serving from a daemon thread."""
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
                entry = server._next(json.loads(raw), raw)
                time.sleep(entry.get("sleep", 0))
                status = entry.get("status", 200)
                if status != 200:
                    payload: dict[str, Any] = {
                        "error": {"message": "scripted failure", "type": "server_error"}
                    }
                else:
                    payload = {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": "scripted-judge",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": entry["content"]},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                self.send_json(status, payload)

        self._serve(Handler, "judge-server")
        return self
