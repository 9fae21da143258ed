"""State isolation for real servers: fresh copies of a server's data files for each session.

A fresh MCP session per rollout isolates only servers that keep their state per session. Most real
servers keep it in a file or folder they are pointed at (a knowledge-graph JSON file, a SQLite database,
a git repository), so two rollouts would see each other's writes and write into the real data. A stdio
server config can therefore name its *state*, copied afresh for each session.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from art_adapters import ConfigError
from mcp_tools._config import (
    HTTP_STATE_MESSAGE,
    STATE_PLACEHOLDER,
    HttpServer,
    StateCopy,
    StdioServer,
    parse_servers,
    parse_state_option,
)

logger = logging.getLogger(__name__)

__all__ = ["SessionState", "warn_unisolated", "with_state", "writing_tools"]


def with_state(server: Any, state: Iterable[StateCopy | str]) -> StdioServer:
    """One stdio server with per-session *state* added to its config.

    Three ways to say the same thing::

        memory = mcp_tools.StdioServer(
            command="npx", args=["-y", "@modelcontextprotocol/server-memory"],
            state=[mcp_tools.StateCopy(source=Path("memory.jsonl"), env="MEMORY_FILE_PATH")],
        )
        git = "python -m mcp_server_git --repository {state:./repo}"     # a placeholder, in place
        git = mcp_tools.with_state("python -m mcp_server_git", ["./repo=--repository"])  # the same

    A streamable-HTTP server is one process shared by every session: the client cannot hand
    it a copy, so state on an HTTP server is a :class:`art_adapters.ConfigError`.

    Args:
        server: a single stdio server as :func:`mcp_tools.load_tools` takes it (a command
            list or string, a config dict or a :class:`StdioServer`).
        state: :class:`StateCopy` objects, or the command line's ``SOURCE=ENV`` /
            ``SOURCE=--flag`` strings.

    Raises:
        ConfigError: *server* is several servers or an HTTP server, or a state is invalid.
    """
    specs = parse_servers(server)
    if len(specs) != 1:
        raise ConfigError("per-rollout state belongs to one server; give it in each server's own config")
    spec = next(iter(specs.values()))
    copies = [item if isinstance(item, StateCopy) else parse_state_option(item) for item in state]
    if isinstance(spec, HttpServer):
        if copies:
            raise ConfigError(f"server {spec.url}: {HTTP_STATE_MESSAGE}")
        raise ConfigError("with_state needs a stdio server")
    return spec.model_copy(update={"state": [*spec.state, *copies]})


def _copy(source: Path, root: Path, index: int) -> Path:
    if not source.exists():
        raise ConfigError(f"state source {str(source)!r} no longer exists; cannot give the server a copy")
    target = root / str(index) / (source.name or "state")
    target.parent.mkdir(parents=True)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target)
    return target


def _rmtree(root: Path) -> None:
    def report(_func: Any, path: str, exc: Any) -> None:
        exc = exc[1] if isinstance(exc, tuple) else exc  # onerror passes exc_info, onexc the exception
        logger.warning("could not delete MCP state copy %s: %s", path, exc)

    if sys.version_info >= (3, 12):
        shutil.rmtree(root, onexc=report)
    else:  # pragma: no cover - Python 3.11
        shutil.rmtree(root, onerror=report)


class SessionState:
    """The fresh state copies of one session's servers; :meth:`remove` deletes them.

    Each :class:`~mcp_tools.McpSession` (so each :func:`mcp_tools.rollout`, which opens one
    session per tool set):

    1. copies every state source (file or folder, symlinks kept as links) into a new
       temporary folder of its own, ``<tmp>/mcp-state-<server>-<random>/<n>/<name>``
       (the original's name is kept, so extensions and repository names still match);
    2. starts its own server process with the copy's path in the environment variable
       (``env=``), after the flag (``arg=``), or wherever ``{state:PATH}`` stood in the args,
       env values or cwd;
    3. deletes the folder when the session closes, after the process has stopped. With
       ``McpClientConfig(state_dir=...)`` the folders go there instead and are kept, to
       inspect what a rollout did.

    The original is only ever read.

    Use :meth:`prepare`; it copies synchronously (call it in a worker thread for big folders).

    Attributes:
        servers: the servers as they are started: state resolved to the copies' paths.
        folders: each isolated server's folder of copies.
        keep: whether :meth:`remove` leaves the folders (``state_dir`` was given).
    """

    def __init__(self, servers: dict[str, StdioServer | HttpServer], keep: bool) -> None:
        self.servers = servers
        self.folders: dict[str, Path] = {}
        self.keep = keep

    @classmethod
    def prepare(
        cls, servers: Mapping[str, StdioServer | HttpServer], state_dir: Path | None = None
    ) -> SessionState:
        """Copy every isolated server's state into a new folder and resolve its config.

        Raises:
            ConfigError: a state source is missing (the copies made so far are removed).
        """
        state = cls(dict(servers), keep=state_dir is not None)
        try:
            for name, spec in servers.items():
                if isinstance(spec, StdioServer) and spec.isolated:
                    state.servers[name] = state._materialize(name, spec, state_dir)
        except BaseException:
            state.remove(force=True)
            raise
        return state

    def _materialize(self, name: str, spec: StdioServer, state_dir: Path | None) -> StdioServer:
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40]
        root = Path(tempfile.mkdtemp(prefix=f"mcp-state-{safe}-", dir=state_dir))
        self.folders[name] = root
        copies: dict[Path, str] = {}

        def copy_of(source: str | Path) -> str:
            key = Path(source).expanduser().resolve()
            if key not in copies:
                copies[key] = str(_copy(key, root, len(copies)))
            return copies[key]

        def substitute(text: str) -> str:
            return STATE_PLACEHOLDER.sub(lambda m: copy_of(m.group(1)), text)

        args = [substitute(a) for a in spec.args]
        env = {k: substitute(v) for k, v in (spec.env or {}).items()}
        cwd = substitute(spec.cwd) if spec.cwd else None
        for item in spec.state:
            path = copy_of(item.source)
            if item.env is not None:
                env[item.env] = path
            else:
                args += [str(item.arg), path]
        logger.debug("MCP server %r: state copies %s in %s", name, sorted(copies.values()), root)
        return spec.model_copy(update={"args": args, "env": env or None, "cwd": cwd, "state": []})

    def remove(self, *, force: bool = False) -> None:
        """Delete the copies (unless kept, or *force*). Idempotent; a failure is logged, not raised."""
        folders, self.folders = self.folders, {}
        for name, root in folders.items():
            if self.keep and not force:
                logger.info("MCP server %r: this session's state copies are kept in %s", name, root)
                continue

            _rmtree(root)


def writing_tools(tools: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the tools whose MCP annotations say they write (``readOnlyHint`` false) or destroy."""
    names = []
    for tool in tools:
        hints = tool.get("annotations") or {}
        if hints.get("readOnlyHint") is True:
            continue
        if hints.get("readOnlyHint") is False or hints.get("destructiveHint") is True:
            names.append(str(tool["name"]))
    return names


def warn_unisolated(
    servers: Mapping[str, StdioServer | HttpServer], listing: Mapping[str, list[dict[str, Any]]]
) -> None:
    """Log a warning for each server whose tools write or destroy while it has no state isolation.

    A tool writes or destroys when its MCP annotations say so (``readOnlyHint: false`` or
    ``destructiveHint: true``); the warning names those tools and the fix. Tools without
    annotations are not counted (most servers written for a demo have none, and guessing
    would make the warning noise).
    """
    for name, tools in listing.items():
        spec = servers.get(name)
        if spec is None or (isinstance(spec, StdioServer) and spec.isolated):
            continue
        writers = writing_tools(tools)
        if not writers:
            continue
        shown = ", ".join(writers[:8]) + (f" and {len(writers) - 8} more" if len(writers) > 8 else "")
        if isinstance(spec, HttpServer):
            fix = (
                "It is reached over HTTP, so the client cannot give each rollout a fresh copy of its data: "
                "reset its state between rollouts yourself, or run it over stdio with per-rollout state."
            )
        else:
            fix = (
                "If it keeps its data in a file or folder, give each rollout a fresh copy: "
                "StdioServer(state=[StateCopy(source=..., env=... or arg=...)]), '{state:PATH}' in its "
                "args or env, or `train-mcp --state SOURCE=ENV_OR_FLAG`."
            )
        logger.warning(
            "MCP server %r has tools that write or delete data by their MCP annotations (%s) and no "
            "per-rollout state isolation: rollouts can see each other's writes and change the server's "
            "real data. %s",
            name,
            shown,
            fix,
        )
