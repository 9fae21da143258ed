"""MCP record and replay: every ``tools/call`` of a rollout kept in a cassette file, and played back.

A :class:`Cassette` is a JSON Lines file plus the in-memory index of what it holds. Tools given one
(``load_tools(..., cassette=)`` or ``mcp_tools.rollout(cassette=)``) look each call up before calling
the server: a call found there gets the recorded result (and the server is not touched); a call not
found goes live or fails, as the cassette's ``on_missing`` says, and a recording cassette appends the
live answer. See ``docs/mcp-record-replay.md``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import threading
import weakref
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, TypeAdapter, ValidationError

from art_adapters import ConfigError, ToolServerError
from art_adapters.files import PRIVATE_FILE_MODE, append_durably, write_atomic

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "CASSETTE_VERSION",
    "CallSlot",
    "Cassette",
    "CassetteCall",
    "CassetteError",
    "CassetteMissError",
    "canonical_arguments",
]

logger = logging.getLogger(__name__)

#: The file format version written in a cassette's header line.
CASSETTE_VERSION = 1

CassetteMode = Literal["record", "replay", "record_new"]
MissingPolicy = Literal["live", "fail"]


class CallSlot(NamedTuple):
    """Identifies one call: what identical calls share, and which of them this one is."""

    server: str
    tool: str
    #: the arguments as :func:`canonical_arguments` writes them
    arguments: str
    #: how many identical calls its rollout made before this one: 0 for the first
    occurrence: int


class CassetteError(ConfigError):
    """A cassette file is missing, unreadable or holds an invalid line; the message names ``file:line``."""


class CassetteMissError(CassetteError):
    """A call is not in the cassette and its ``on_missing`` is ``"fail"``; the message names the tool,
    the arguments and the cassette file."""


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def canonical_arguments(arguments: dict[str, Any] | None) -> str:
    """The arguments as canonical JSON: keys sorted, no spaces, integral floats as integers (2.0 -> 2)."""
    return json.dumps(
        _normalize(arguments or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )


class _Header(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["header"] = "header"
    version: int = CASSETTE_VERSION
    created_at: datetime | None = None


class _ToolList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["tools"] = "tools"
    server: str
    tools: list[dict[str, Any]]


class CassetteCall(BaseModel):
    """One recorded ``tools/call``: a line of a cassette file.

    Attributes:
        type: always ``"call"`` (tells the line apart from the header and tool lists).
        server: the MCP server's name (as in records and spans).
        tool: the tool's name on the server (without any ``<server>_`` prefix).
        arguments: the arguments it was called with.
        occurrence: how many identical calls (same server, tool and canonical arguments) the
            recording rollout had made before this one: 0 for the first.
        result: the ``CallToolResult`` in wire form (``content``, ``isError``,
            ``structuredContent``...); ``None`` when the call failed.
        error: the failure's message when the server crashed, hung or refused the call
            (replayed as a :class:`art_adapters.ToolServerError`); ``None`` otherwise.
        duration_s: wall-clock seconds the live call took.
        started_at: when the live call started (UTC).
        rollout_id: the id of the rollout that recorded it, when there was one.
    """

    model_config = ConfigDict(extra="forbid")

    type: Literal["call"] = "call"
    server: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    occurrence: NonNegativeInt = 0
    result: dict[str, Any] | None = None
    error: str | None = None
    duration_s: float | None = None
    started_at: datetime | None = None
    rollout_id: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """``(server, tool, canonical arguments)``: what identical calls share."""
        return self.server, self.tool, canonical_arguments(self.arguments)


_LINE: TypeAdapter[_Header | _ToolList | CassetteCall] = TypeAdapter(
    Annotated[_Header | _ToolList | CassetteCall, Field(discriminator="type")]
)


def _line_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


class Cassette:
    """A recording of MCP ``tools/call`` results in a JSON Lines file, recorded or replayed.

    File format, one JSON object a line, told apart by ``type``::

        {"type": "header", "version": 1, "created_at": "..."}
        {"type": "tools", "server": "calc", "tools": [{"name": "add", "inputSchema": {...}}, ...]}
        {"type": "call", "server": "calc", "tool": "add", "arguments": {"a": 2, "b": 3}, "occurrence": 0,
         "result": {"content": [...], "isError": false}, "error": null, "duration_s": 0.004, ...}

    Each line is written whole with one ``write`` and fsynced before the call returns, so a crash loses
    at most the call in flight; a cut or garbled line is reported with its ``file:line``.

    Matching: a call is its server, MCP tool name and the canonical JSON of its arguments (keys sorted,
    no spaces, integral floats written as integers, as RFC 8785 writes numbers); the n-th time a rollout
    makes the same call it gets the n-th recorded answer to that call (``occurrence`` n-1), whichever
    rollout recorded it.

    Give it to :func:`mcp_tools.load_tools` (every call of those tools, and their tool list) or to
    :func:`mcp_tools.rollout` (every call inside that rollout)::

        cassette = mcp_tools.Cassette("calls.jsonl", mode="record")
        tools = await mcp_tools.load_tools("python -m my_server", cassette=cassette)

        # later, in CI, without the server:
        cassette = mcp_tools.Cassette("calls.jsonl")          # mode="replay", on_missing="fail"
        tools = await mcp_tools.load_tools("python -m my_server", cassette=cassette)  # starts nothing

    Identical calls share one answer: the n-th identical call (same server, tool and canonical
    arguments) of each rollout gets the n-th recorded answer, whichever rollout recorded it, so
    a group of rollouts sharing a cassette sees the same result for the same call; concurrent
    identical calls wait for the first one's answer instead of calling the server twice. Calls
    outside any :func:`mcp_tools.rollout` count as one rollout.

    Args:
        path: the cassette file (``.jsonl``). Its folder is created when recording.
        mode: ``"replay"`` (default): read the file, which must exist, and never write it.
            ``"record"``: start the file afresh (an existing file is replaced) and record every
            call. ``"record_new"``: keep what the file holds (created if missing), replay it, and
            record the calls it lacks.
        on_missing: what a call that is not in the cassette does. ``"live"``: call the server
            (a recording cassette appends the answer; in replay mode the answer is shared with
            later identical calls in memory only). ``"fail"``: raise :class:`CassetteMissError`
            naming the tool, the arguments and the file. Default: ``"fail"`` in replay mode,
            ``"live"`` when recording (the only choice there).

    Raises:
        ConfigError: *mode* or *on_missing* is not one of the values above, or ``on_missing="fail"``
            with a recording mode.
        CassetteError: in replay or record_new mode, the file cannot be read or holds an invalid
            line (the message names ``file:line``); in replay mode, it does not exist.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: CassetteMode = "replay",
        on_missing: MissingPolicy | None = None,
    ) -> None:
        if mode not in ("record", "replay", "record_new"):
            raise ConfigError(f"cassette mode {mode!r} is not one of 'record', 'replay', 'record_new'")
        if on_missing not in (None, "live", "fail"):
            raise ConfigError(f"on_missing {on_missing!r} is not one of 'live', 'fail'")
        if mode != "replay" and on_missing == "fail":
            raise ConfigError(
                f"on_missing='fail' with mode={mode!r}: a recording cassette always calls the server for "
                "what it lacks; use mode='replay' to fail on calls that were not recorded"
            )
        self.path = Path(path)
        self.mode: CassetteMode = mode
        self.on_missing: MissingPolicy = on_missing or ("fail" if mode == "replay" else "live")
        self._calls: dict[CallSlot, CassetteCall] = {}
        self._tools: dict[str, list[dict[str, Any]]] = {}
        self._pending: dict[CallSlot, asyncio.Future[None]] = {}
        self._counters: weakref.WeakKeyDictionary[Any, Counter[tuple[str, str, str]]] = (
            weakref.WeakKeyDictionary()
        )
        self._unscoped: Counter[tuple[str, str, str]] = Counter()
        self._write_lock = threading.Lock()
        if mode == "record" or (mode == "record_new" and not self.path.exists()):
            self._write_header()
        else:
            self._load()

    def __repr__(self) -> str:
        return f"Cassette({str(self.path)!r}, mode={self.mode!r}, on_missing={self.on_missing!r})"

    @property
    def recording(self) -> bool:
        """Whether live answers are appended to the file (modes ``record`` and ``record_new``)."""
        return self.mode != "replay"

    @property
    def calls(self) -> list[CassetteCall]:
        """The calls the cassette holds now (loaded and recorded), in the order they were added."""
        return list(self._calls.values())

    def tools(self, server: str) -> list[dict[str, Any]] | None:
        """The recorded tool list (MCP wire dicts) of *server*, or ``None`` if it has none."""
        tools = self._tools.get(server)
        return list(tools) if tools is not None else None

    # -- the file ---------------------------------------------------------------------------------

    def _write_header(self) -> None:
        header = _Header(created_at=datetime.now(UTC))
        data = (header.model_dump_json() + "\n").encode("utf-8")
        try:
            write_atomic(self.path, data, mode=PRIVATE_FILE_MODE)
        except OSError as exc:
            raise CassetteError(
                f"cannot create cassette {self.path}: {exc}; check the folder is writable"
            ) from exc

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CassetteError(
                f"no cassette at {self.path} (resolved against {Path.cwd()}); record one first with "
                "mode='record' (or mode='record_new', which creates it)"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CassetteError(f"cannot read cassette {self.path}: {exc}") from exc
        lines = text.split("\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            last = number == len(lines)  # no newline after it: the write was cut short
            try:
                entry = _LINE.validate_json(line)
            except ValidationError as exc:
                cut = " (the line is cut short: did a recording crash while writing it?)" if last else ""
                raise CassetteError(
                    f"{self.path}:{number}: invalid cassette line{cut}: {_line_problem(exc)}; delete or fix "
                    f"line {number} (the lines before it are intact), or record the cassette again"
                ) from exc
            if isinstance(entry, _Header):
                if entry.version != CASSETTE_VERSION:
                    raise CassetteError(
                        f"{self.path}:{number}: cassette format version {entry.version}, this mcp_tools "
                        f"reads version {CASSETTE_VERSION}; record the cassette again"
                    )
            elif isinstance(entry, _ToolList):
                self._tools[entry.server] = entry.tools
            else:
                slot = CallSlot(*entry.key, entry.occurrence)
                if slot in self._calls:
                    logger.debug("%s:%d repeats a recorded call; the first one is kept", self.path, number)
                else:
                    self._calls[slot] = entry

    def _append(self, line: str) -> None:
        """Append one whole line and fsync it (a crash afterwards cannot lose it; see
        :func:`art_adapters.files.append_durably`)."""
        with self._write_lock:
            append_durably(self.path, (line + "\n").encode("utf-8"))

    async def _persist(self, line: str) -> None:
        try:
            await asyncio.to_thread(self._append, line)
        except OSError as exc:
            raise CassetteError(f"cannot append to cassette {self.path}: {exc}") from exc

    async def record_tools(self, server: str, tools: list[dict[str, Any]]) -> None:
        """Keep *server*'s tool list (appended when recording, if new or changed) for offline listing."""
        if self._tools.get(server) == tools:
            return
        self._tools[server] = list(tools)
        if self.recording:
            await self._persist(_ToolList(server=server, tools=tools).model_dump_json())

    # -- matching (no I/O) --------------------------------------------------------------------------

    def slot(self, scope: Any, server: str, tool: str, arguments: dict[str, Any]) -> CallSlot:
        """The slot of a call made now in rollout *scope* (``None``: outside any rollout), counting it."""
        key = (server, tool, canonical_arguments(arguments))
        if scope is None:
            counter = self._unscoped
        else:
            counter = self._counters.get(scope)
            if counter is None:
                counter = self._counters[scope] = Counter()
        occurrence = counter[key]
        counter[key] += 1
        return CallSlot(*key, occurrence)

    async def claim(self, slot: CallSlot) -> CassetteCall | None:
        """The recorded answer for *slot*, or ``None`` when the caller must call the server.

        A ``None`` makes the caller the slot's owner: it must then call :meth:`store` or
        :meth:`release`. While another caller owns the slot this waits for its answer.

        Raises:
            CassetteMissError: the slot is not recorded and ``on_missing`` is ``"fail"``.
        """
        while True:
            recorded = self._calls.get(slot)
            if recorded is not None:
                return recorded
            pending = self._pending.get(slot)
            if pending is None:
                break
            await asyncio.shield(pending)  # the owner stored an answer, or gave up: look again
        if self.on_missing == "fail":
            raise CassetteMissError(self._miss_message(slot))
        self._pending[slot] = asyncio.get_running_loop().create_future()
        return None

    def release(self, slot: CallSlot) -> None:
        """Give up a claimed slot without an answer (the call was cancelled): a waiter takes it over."""
        pending = self._pending.pop(slot, None)
        if pending is not None and not pending.done():
            pending.set_result(None)

    async def store(self, slot: CallSlot, call: CassetteCall) -> None:
        """Keep the live answer of a claimed slot (appended to the file when recording), then wake waiters."""
        try:
            self._calls[slot] = call
            if self.recording:
                await self._persist(call.model_dump_json(exclude_none=True))
        finally:
            self.release(slot)

    def _miss_message(self, slot: CallSlot) -> str:
        server, tool, arguments, occurrence = slot
        same_tool = [c for c in self._calls.values() if c.server == server and c.tool == tool]
        same_call = sum(1 for c in same_tool if canonical_arguments(c.arguments) == arguments)
        if same_call:
            held = f"it holds {same_call} answer(s) to this call, and this is call number {occurrence + 1}"
        elif same_tool:
            recorded = _sample(canonical_arguments(c.arguments) for c in same_tool)
            held = f"it holds {tool!r} only with the arguments {recorded}"
        else:
            held = f"it holds no call of {tool!r} on server {server!r}"
        return (
            f"MCP call {tool}({arguments}) on server {server!r} is not in cassette {self.path}: {held}. "
            "Record it with Cassette(..., mode='record_new') against the live server, or pass "
            "on_missing='live' to call the server for calls the cassette lacks"
        )


def _sample(texts: Iterable[str], limit: int = 3) -> str:
    unique = list(dict.fromkeys(texts))
    shown = ", ".join(unique[:limit])
    return shown + (f" and {len(unique) - limit} more" if len(unique) > limit else "")


def replay_result(call: CassetteCall, cassette: Cassette) -> dict[str, Any]:
    """The recorded result of *call*; a recorded failure is raised again as a ToolServerError.

    Raises:
        ToolServerError: the recorded call failed (the server crashed, hung or refused it).
    """
    if call.error is not None or call.result is None:
        raise ToolServerError(f"{call.error or 'the call failed'} (replayed from cassette {cassette.path})")
    return call.result
