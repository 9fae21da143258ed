"""How to reach MCP servers, and how the client behaves: parsed once, validated with clear errors.

:func:`parse_servers` turns any accepted *server* argument (a command, a URL, a config dict) into named
:class:`StdioServer` / :class:`HttpServer` specs; :class:`McpClientConfig` holds the client's settings.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    field_validator,
    model_validator,
)

from art_adapters import ConfigError

__all__ = [
    "STATE_PLACEHOLDER",
    "HttpServer",
    "McpClientConfig",
    "ServerSpec",
    "StateCopy",
    "StdioServer",
    "parse_servers",
    "parse_state_option",
]

_HTTP_TRANSPORTS = {"streamable_http", "streamable-http", "http"}
_UNSUPPORTED_TRANSPORTS = {"sse", "websocket"}

#: ``{state:PATH}`` in a stdio server's args, env values or cwd: per session, the path of a copy of PATH.
STATE_PLACEHOLDER = re.compile(r"\{state:([^{}]+)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_source(source: str | Path) -> Path:
    path = Path(source).expanduser()
    if not path.exists():
        raise ValueError(
            f"state source {str(source)!r} does not exist (resolved against {Path.cwd()}); "
            "name the file or folder the server keeps its data in"
        )
    return path


class StateCopy(BaseModel):
    """A file or folder a stdio server keeps its data in, copied fresh for each session.

    Each MCP session (so each :func:`mcp_tools.rollout`) copies *source* into its own
    temporary folder and hands the copy's path to the server it starts, so rollouts never
    see each other's writes and the original is never touched.

    Attributes:
        source: the original file or folder (a relative path is taken from the client's
            working directory when the copy is made). Must exist.
        env: set this environment variable of the server to the copy's path
            (e.g. ``MEMORY_FILE_PATH``).
        arg: append ``arg <copy>`` to the server's arguments (a flag such as ``--repository``).
            Exactly one of *env* and *arg*; to put the path elsewhere in the command line,
            write ``{state:PATH}`` there instead.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Path
    env: str | None = None
    arg: str | None = None

    @field_validator("source")
    @classmethod
    def _exists(cls, source: Path) -> Path:
        return _check_source(source)

    @model_validator(mode="after")
    def _one_target(self) -> StateCopy:
        if (self.env is None) == (self.arg is None):
            raise ValueError(
                f"state {str(self.source)!r}: give exactly one of env= (an environment variable) and arg= "
                "(a flag such as --repository)"
            )
        if self.env is not None and not _ENV_NAME.fullmatch(self.env):
            raise ValueError(f"state env {self.env!r} is not an environment variable name")
        if self.arg is not None and not self.arg.startswith("-"):
            raise ValueError(
                f"state arg {self.arg!r} must be a flag starting with '-'; "
                "for a positional path write {state:PATH} in the args"
            )
        return self


def _first_error(exc: ValidationError) -> str:
    return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")


def parse_state_option(text: str) -> StateCopy:
    """Parse the command line's ``SOURCE=ENV`` or ``SOURCE=--flag`` into a :class:`StateCopy`.

    Raises:
        ConfigError: no ``=``, or the source or target is invalid.
    """
    source, sep, target = text.rpartition("=")
    if not sep or not source or not target:
        raise ConfigError(
            f"--state {text!r}: write SOURCE=ENV (e.g. ./memory.jsonl=MEMORY_FILE_PATH) "
            "or SOURCE=--flag (e.g. ./repo=--repository)"
        )
    fields = {"arg": target} if target.startswith("-") else {"env": target}
    try:
        return StateCopy(source=Path(source), **fields)
    except ValidationError as exc:
        raise ConfigError(f"--state {text!r}: {_first_error(exc)}") from exc


class StdioServer(BaseModel):
    """An MCP server started as a subprocess and spoken to over stdin/stdout.

    A stdio server's data files or folders may be declared as per-rollout *state* (:class:`StateCopy`,
    or ``{state:PATH}`` in its args, env or cwd): each session gets fresh copies of them (see
    :class:`mcp_tools._isolation.SessionState`).

    Attributes:
        command: the executable (``"python"``, ``"npx"``...). A bare ``python`` or ``python3``
            means the interpreter running this code (``sys.executable``), so
            ``"python -m mcp_tools.servers.notes"`` starts the server in the project's environment
            whether or not it is activated; write a path (``/usr/bin/python3``) for another
            interpreter.
        args: its arguments.
        env: extra environment variables, merged over the SDK's safe default environment.
        cwd: working directory of the process (default: ours).
        state: files or folders copied fresh for each session and handed to the server
            (see :class:`StateCopy`); ``{state:PATH}`` in *args*, *env* values or *cwd* does
            the same in place. Default none: every session works on the server's real data.
    """

    model_config = ConfigDict(extra="forbid")

    transport: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    state: list[StateCopy] = Field(default_factory=list)

    @field_validator("command")
    @classmethod
    def _our_python(cls, command: str) -> str:
        return sys.executable if command in _BARE_PYTHONS else command

    @model_validator(mode="after")
    def _placeholders_exist(self) -> StdioServer:
        for text in self.placeholder_texts():
            for match in STATE_PLACEHOLDER.finditer(text):
                _check_source(match.group(1))
        return self

    def placeholder_texts(self) -> list[str]:
        """The strings that may hold ``{state:PATH}``: args, env values and cwd."""
        return [*self.args, *(self.env or {}).values(), *([self.cwd] if self.cwd else [])]

    @property
    def isolated(self) -> bool:
        """Whether each session gets fresh copies of some state (``state`` or a placeholder)."""
        return bool(self.state) or any(STATE_PLACEHOLDER.search(t) for t in self.placeholder_texts())


class HttpServer(BaseModel):
    """An MCP server reached over streamable HTTP.

    Attributes:
        url: the MCP endpoint, e.g. ``http://127.0.0.1:8123/mcp``.
        headers: extra HTTP headers (authentication...).
    """

    model_config = ConfigDict(extra="forbid")

    transport: Literal["streamable_http"] = "streamable_http"
    url: str
    headers: dict[str, str] | None = None


ServerSpec = Annotated[StdioServer | HttpServer, Field(discriminator="transport")]


class McpClientConfig(BaseModel):
    """How the MCP middleware calls servers. One object, every field documented here.

    Attributes:
        call_timeout_s: seconds one ``tools/call`` may take before the rollout gets a
            :class:`art_adapters.ToolServerError` (default 60). A hung server never
            hangs the rollout; raise this for tools that are slow on purpose.
        connect_timeout_s: seconds to start a server (or reach it) and finish the MCP
            handshake (default 30).
        tool_name_prefix: with several servers, whether tool names get ``<server>_`` in
            front. ``None`` (default): only names that two servers share are prefixed;
            ``True``: all; ``False``: none, and a shared name is a :class:`ConfigError`.
        state_dir: where each session's copies of the servers' state go (see
            :class:`StateCopy`). ``None`` (default): a new temporary folder per session, deleted
            when the session closes. A folder: each session's copies go to a new subfolder
            ``<server>-<random>`` there and are kept, to inspect what a rollout did.
    """

    model_config = ConfigDict(extra="forbid")

    call_timeout_s: PositiveFloat = 60.0
    connect_timeout_s: PositiveFloat = 30.0
    tool_name_prefix: bool | None = None
    state_dir: Path | None = None


HTTP_STATE_MESSAGE = (
    "per-rollout state copies work for stdio servers only: a streamable-HTTP server is one process "
    "shared by every session, and the client cannot hand it a fresh copy of its data. Run the server "
    "over stdio (a command) with state, or reset its data between rollouts yourself."
)


def client_config(config: McpClientConfig | None, overrides: Mapping[str, Any]) -> McpClientConfig:
    """Merge keyword overrides into a config, turning validation failures into :class:`ConfigError`."""
    base = config or McpClientConfig()
    if not overrides:
        return base
    try:
        return McpClientConfig.model_validate({**base.model_dump(), **overrides})
    except ValidationError as exc:
        raise ConfigError(f"invalid MCP client option: {exc}") from exc


#: Commands that mean "the Python running us" in a stdio server command.
_BARE_PYTHONS = frozenset({"python", "python3"})
#: Commands that run a program named by their first positional argument.
_INTERPRETERS = frozenset({"python", "python3", "node", "deno", "bun", "ruby", "perl", "bash", "sh"})
_LAUNCHERS = frozenset({"npx", "uvx", "pipx", "bunx", "pnpx"})
#: Launcher words that come before the package: ``pipx run PKG``, ``uv run`` / ``uv tool run``, ``npm exec``.
_LAUNCHER_VERBS = frozenset({"run", "tool", "exec", "dlx"})
_SCRIPT_SUFFIXES = frozenset({".py", ".js", ".mjs", ".cjs", ".ts"})
#: Folder and file stems that say nothing about which server a script is.
_GENERIC_STEMS = frozenset(
    {"index", "main", "server", "cli", "__main__", "dist", "build", "lib", "src", "bin", "app"}
)


def _script_name(path: str) -> str:
    """``/x/server-memory/dist/index.js`` -> ``server-memory``: the first telling part, from the file up."""
    parts = PurePath(path)
    for part in [parts.stem, *(p.name for p in parts.parents)]:
        if part and part not in _GENERIC_STEMS and part not in (".", ".."):
            return part
    return parts.stem or path


def _name_from_command(command: str, args: list[str]) -> str:
    """A stdio server's name, from what the command runs.

    The module of ``python -m MODULE``, the script of ``python script.py``, the package of
    ``npx``/``uvx``/``pipx run``, else the executable itself (a console script such as
    ``mcp-server-git``), never an option's value.
    """
    program = PurePath(command).name
    if program.startswith("python") or PurePath(command) == PurePath(sys.executable):
        program = "python"
    if "-m" in args and args.index("-m") + 1 < len(args) and program == "python":
        return args[args.index("-m") + 1].rsplit(".", 1)[-1]
    if program == "python" and "-c" in args:
        return "python"
    if program in ("uv", "npm", "pnpm", "yarn") or program in _LAUNCHERS:
        words = [a for a in args if not a.startswith("-") and a not in _LAUNCHER_VERBS]
        scripts = [w for w in words if PurePath(w).suffix in _SCRIPT_SUFFIXES]
        if scripts:
            return _script_name(scripts[0])
        if words:  # the package: @scope/name@version -> name
            return words[0].rsplit("/", 1)[-1].split("@", 1)[0] or words[0]
    if program in _INTERPRETERS:
        scripts = [a for a in args if not a.startswith("-")]
        if scripts:
            return _script_name(scripts[0])
    return PurePath(command).stem


def _name_from_url(url: str) -> str:
    """A host name's words (``api_example_com``); a local or numeric host says nothing, so its port does
    (``http_8123``), which also keeps two local servers apart."""
    parsed = urlparse(url)
    host = parsed.hostname or "server"
    numeric = re.fullmatch(r"[\d.]+|[0-9a-fA-F:]*:[0-9a-fA-F:]*", host) is not None
    if (numeric or host == "localhost") and parsed.port is not None:
        return f"http_{parsed.port}"
    return re.sub(r"[^A-Za-z0-9_]", "_", host)


def _spec_from_mapping(data: Mapping[str, Any], where: str) -> StdioServer | HttpServer:
    data = dict(data)
    transport = str(data.pop("transport", "stdio" if "command" in data else "streamable_http"))
    if transport in _UNSUPPORTED_TRANSPORTS:
        raise ConfigError(
            f"{where}: transport {transport!r} is not supported; use 'stdio' or 'streamable_http'"
        )
    if transport in _HTTP_TRANSPORTS:
        transport = "streamable_http"
        if data.get("state"):
            raise ConfigError(f"{where}: {HTTP_STATE_MESSAGE}")
    elif transport != "stdio":
        raise ConfigError(f"{where}: unknown transport {transport!r}; use 'stdio' or 'streamable_http'")
    try:
        if transport == "stdio":
            return StdioServer.model_validate(data)
        return HttpServer.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: invalid {transport} server config: {exc}") from exc


def _stdio(command: str, args: list[str]) -> StdioServer:
    try:
        return StdioServer(command=command, args=args)
    except ValidationError as exc:  # a {state:PATH} placeholder naming a missing file
        raise ConfigError(f"invalid stdio server {command!r}: {_first_error(exc)}") from exc


def _single(server: Any, name: str | None) -> tuple[str, StdioServer | HttpServer]:
    if isinstance(server, StdioServer | HttpServer):
        spec = server
    elif isinstance(server, str):
        text = server.strip()
        if not text:
            raise ConfigError("server is an empty string; pass a command, an http(s) URL or a config dict")
        if text.startswith(("http://", "https://")):
            spec = HttpServer(url=text)
        else:
            parts = shlex.split(text)
            spec = _stdio(parts[0], parts[1:])
    elif isinstance(server, list | tuple):
        if not server or not all(isinstance(p, str) and p for p in server):
            raise ConfigError(
                f"a stdio command must be a non-empty list of non-empty strings, got {server!r}"
            )
        spec = _stdio(server[0], list(server[1:]))
    elif isinstance(server, Mapping):
        spec = _spec_from_mapping(server, "server")
    else:
        raise ConfigError(
            f"cannot use {type(server).__name__} as an MCP server; pass a command (list or string), "
            "an http(s) URL, or a config dict"
        )
    if name is None:
        name = (
            _name_from_command(spec.command, spec.args)
            if isinstance(spec, StdioServer)
            else _name_from_url(spec.url)
        )
    return name, spec


def parse_servers(server: Any, *, name: str | None = None) -> dict[str, StdioServer | HttpServer]:
    """Turn any accepted *server* argument into ``{server name: spec}``.

    Args:
        server: one of

            * a stdio command, as a list (``["python", "-m", "mcp_tools.servers.calculator"]``)
              or a shell-like string (``"python -m mcp_tools.servers.calculator"``);
            * a streamable-HTTP URL (``"http://127.0.0.1:8123/mcp"``);
            * one server's config dict (``{"command": ..., "args": [...]}`` or ``{"url": ...}``);
            * a config dict naming several servers, in the shape langchain-mcp-adapters'
              ``MultiServerMCPClient`` takes: ``{"calc": {...}, "notes": {...}}``.
        name: the server's name when *server* describes one server: its tools' prefix when
            several servers share a name, and what messages and metadata call it (default:
            derived from the module, script or package the command runs, see
            :func:`_name_from_command`, or from the URL's host). Not allowed with a
            multi-server dict.

    Raises:
        ConfigError: naming what is wrong and what to pass instead.
    """
    if isinstance(server, Mapping) and not ({"command", "url"} & set(server)):
        if not server:
            raise ConfigError("the server config dict is empty; name at least one server")
        if name is not None:
            raise ConfigError("name= is for a single server; a multi-server dict already names its servers")
        specs: dict[str, StdioServer | HttpServer] = {}
        for key, value in server.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(f"server names must be non-empty strings, got {key!r}")
            if isinstance(value, StdioServer | HttpServer):
                specs[key] = value
            elif isinstance(value, Mapping):
                specs[key] = _spec_from_mapping(value, f"server {key!r}")
            else:
                specs[key] = _single(value, key)[1]
        return specs
    server_name, spec = _single(server, name)
    return {server_name: spec}
