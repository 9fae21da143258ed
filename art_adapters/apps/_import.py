"""``art-adapters import SOURCE OUT.jsonl``: traces (file, Phoenix, Langfuse) to trajectories and scenarios.

Production traffic seeds training: every imported trace is one trajectory (JSON Lines, one
``Trajectory`` a line), and the users' first messages become a scenarios file that
``train-mcp --scenarios`` (``mcp_tools.load_scenarios``) reads as it is.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

import mcp_tools
from art_adapters import ConfigError, Trajectory
from art_adapters.files import write_atomic
from art_adapters.observe import (
    parse_time,
    trajectories_from_langfuse,
    trajectories_from_langfuse_api,
    trajectories_from_otlp_json,
    trajectories_from_phoenix,
)

from ._options import exit_on

__all__ = [
    "DEFAULT_PHOENIX_URL",
    "IMPORT_HELP",
    "first_user_message",
    "import_traces",
    "read_source",
    "scenarios_from_trajectories",
]

#: Where ``phoenix`` (without a URL) reads from when $PHOENIX_COLLECTOR_ENDPOINT is not set.
DEFAULT_PHOENIX_URL = "http://localhost:6006"

IMPORT_HELP = (
    "Import traces as trajectories (OUT, JSON Lines) and their users' first messages as scenarios.\n\n"
    "SOURCE is one of:\n\n"
    "\b\n"
    "  PATH           a file: OTLP JSON (as an OTel collector's file\n"
    "                 exporter writes it) or a Langfuse trace export\n"
    "  phoenix:URL    a running Arize Phoenix (phoenix:http://localhost:6006);\n"
    "  phoenix        or at $PHOENIX_COLLECTOR_ENDPOINT (else localhost:6006);\n"
    "                 --project; $PHOENIX_API_KEY is sent when set\n"
    "  langfuse       Langfuse at $LANGFUSE_BASE_URL (else Langfuse Cloud),\n"
    "  langfuse:URL   or at URL; keys from $LANGFUSE_PUBLIC_KEY and\n"
    "                 $LANGFUSE_SECRET_KEY; --tag, --session\n\n"
    "--since/--until keep the traces that started in that window and --limit the newest N, "
    "for every source.\n\n"
    "The scenarios file (default: OUT with .scenarios.jsonl) holds one line per distinct first "
    "user message, in the format `train-mcp --scenarios` reads: id, task, difficulty (from the "
    "trace's tool calls: 0-1 -> 1, 2 -> 2, 3-4 -> 3, 5-7 -> 4, 8 or more -> 5) and metadata "
    "(source, trace_id, trajectory_id, reward). Traces without a user message, repeated tasks "
    "and tasks outside 8..600 characters are counted and left out."
)


def _difficulty(trajectory: Trajectory) -> int:
    calls = sum(len(m.tool_calls or ()) for m in trajectory.messages if m.role == "assistant")
    calls = max(calls, len(trajectory.tool_records))
    return 1 if calls <= 1 else 2 if calls == 2 else 3 if calls <= 4 else 4 if calls <= 7 else 5


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def first_user_message(trajectory: Trajectory) -> str | None:
    """The text of the trajectory's first user message (its main history first), or ``None``."""
    for history in (trajectory.messages, *(h.messages for h in trajectory.additional_histories)):
        for message in history:
            if message.role == "user":
                text = _text(message.content).strip()
                if text:
                    return text
    return None


def _trace_id(trajectory: Trajectory) -> str | None:
    value = trajectory.metadata.get("langfuse_trace_id") or trajectory.metadata.get("trace_id")
    return str(value) if value else None


def scenarios_from_trajectories(
    trajectories: Sequence[Trajectory], *, source: str
) -> tuple[list[mcp_tools.Scenario], dict[str, int]]:
    """One scenario per distinct first user message, and the counts of what was left out.

    The counts are ``no_user_message``, ``duplicate`` (same task once normalised, see
    :func:`mcp_tools.normalize_task`) and ``invalid`` (too short or too long for a scenario).
    """
    scenarios: list[mcp_tools.Scenario] = []
    seen: set[str] = set()
    skipped = {"no_user_message": 0, "duplicate": 0, "invalid": 0}
    for trajectory in trajectories:
        task = first_user_message(trajectory)
        if task is None:
            skipped["no_user_message"] += 1
            continue
        key = mcp_tools.normalize_task(task)
        if key in seen:
            skipped["duplicate"] += 1
            continue
        metadata: dict[str, Any] = {
            "source": source,
            "trace_id": _trace_id(trajectory),
            "trajectory_id": trajectory.id,
        }
        if trajectory.reward is not None:
            metadata["reward"] = trajectory.reward
        try:
            scenario = mcp_tools.Scenario(task=task, difficulty=_difficulty(trajectory), metadata=metadata)
        except ValidationError:
            skipped["invalid"] += 1
            continue
        seen.add(key)
        scenarios.append(scenario)
    return scenarios, skipped


def _read_file(path: Path) -> list[Trajectory]:
    if not path.is_file():
        raise ConfigError(f"no such file: {path} (for a server, write phoenix:URL or langfuse)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    read = (
        trajectories_from_otlp_json if '"resourceSpans"' in text
        else trajectories_from_langfuse if '"observations"' in text
        else None
    )  # fmt: skip
    if read is not None:
        try:
            return read(path)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
            # a malformed file: one line saying so, not a traceback (JSON errors are ValueErrors)
            kind = "OTLP JSON" if read is trajectories_from_otlp_json else "a Langfuse trace export"
            raise ConfigError(
                f"{path} looks like {kind} but could not be read: {type(exc).__name__}: {str(exc)[:300]}"
            ) from exc
    raise ConfigError(
        f"{path} is neither OTLP JSON (objects with 'resourceSpans') nor a Langfuse trace export "
        "(traces with 'observations')"
    )


def _window(
    trajectories: list[Trajectory], since: datetime | None, until: datetime | None
) -> list[Trajectory]:
    def started(t: Trajectory) -> float:
        return t.started_at.timestamp() if t.started_at else -math.inf

    kept = [
        t
        for t in trajectories
        if (since is None or started(t) >= since.timestamp())
        and (until is None or started(t) < until.timestamp())
    ]
    return kept


def read_source(
    source: str,
    *,
    project: str,
    tags: list[str],
    session: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int | None,
    langfuse_legacy_traces_api: bool = False,
) -> list[Trajectory]:
    """The trajectories of SOURCE (see :data:`IMPORT_HELP`), oldest first."""
    kind, _, rest = source.partition(":")
    if kind == "langfuse":
        if project != "default":
            raise ConfigError("--project names a Phoenix project: use it with a phoenix source")
        return trajectories_from_langfuse_api(
            tags=tags, session_id=session, start=since, end=until, limit=limit, base_url=rest or None,
            legacy_traces_api=langfuse_legacy_traces_api,
        )  # fmt: skip
    if langfuse_legacy_traces_api:
        raise ConfigError(
            "--langfuse-legacy-traces-api reads a Langfuse server: use it with a langfuse source"
        )
    if tags or session:
        raise ConfigError("--tag and --session select Langfuse traces: use them with a langfuse source")
    if kind == "phoenix":
        url = rest or os.environ.get("PHOENIX_COLLECTOR_ENDPOINT") or DEFAULT_PHOENIX_URL
        return trajectories_from_phoenix(url, project=project, start=since, end=until, limit=limit)
    if project != "default":
        raise ConfigError("--project names a Phoenix project: use it with a phoenix source")
    if kind in ("http", "https"):
        raise ConfigError(f"say which server {source} is: phoenix:{source} or langfuse:{source}")
    trajectories = _window(_read_file(Path(source)), since, until)
    return trajectories[-limit:] if limit else trajectories


# shape: the import command: one keyword per CLI option; reads, filters, writes and reports in order
def import_traces(
    source: Annotated[
        str,
        typer.Argument(metavar="SOURCE", help="A file, phoenix:URL, langfuse or langfuse:URL (see above)."),
    ],
    out: Annotated[
        Path, typer.Argument(metavar="OUT.jsonl", help="Where to write the trajectories (JSON Lines).")
    ],
    project: Annotated[str, typer.Option(help="Phoenix project name (phoenix: sources).")] = "default",
    tag: Annotated[
        list[str] | None,
        typer.Option(
            "--tag", metavar="TAG", help="Only Langfuse traces with this tag (repeat: all of them)."
        ),
    ] = None,
    session: Annotated[str | None, typer.Option(help="Only Langfuse traces of this session id.")] = None,
    since: Annotated[
        str | None,
        typer.Option(metavar="TIME", help="Only traces started at or after this ISO time (naive = UTC)."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(metavar="TIME", help="Only traces started before this ISO time.")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many traces, the newest.")] = None,
    scenarios: Annotated[
        Path | None,
        typer.Option(metavar="PATH", help="The scenarios file; default OUT with .scenarios.jsonl."),
    ] = None,
    langfuse_legacy_traces_api: Annotated[
        bool,
        typer.Option(
            "--langfuse-legacy-traces-api",
            help="Read Langfuse's deprecated /api/public/traces (a server without Observations API v2).",
        ),
    ] = False,
) -> None:
    """Import traces as trajectories and scenarios (see ``IMPORT_HELP``)."""
    console = Console()
    scenarios_path = scenarios or out.with_name(out.name.removesuffix(".jsonl") + ".scenarios.jsonl")
    with exit_on(console, ConfigError):
        start, end = parse_time(since, "--since"), parse_time(until, "--until")
        with console.status(f"reading {escape(source)}..."):
            trajectories = read_source(
                source,
                project=project,
                tags=list(tag or ()),
                session=session,
                since=start,
                until=end,
                limit=limit,
                langfuse_legacy_traces_api=langfuse_legacy_traces_api,
            )
    if not trajectories:
        console.print(f"[red]no traces found in {escape(source)} for this selection: nothing written[/red]")
        raise typer.Exit(code=1)
    found, skipped = scenarios_from_trajectories(trajectories, source=source)
    write_atomic(out, "".join(t.model_dump_json() + "\n" for t in trajectories).encode("utf-8"))
    lines = [json.dumps(s.model_dump(mode="json"), ensure_ascii=False) + "\n" for s in found]
    write_atomic(scenarios_path, "".join(lines).encode("utf-8"))
    rewarded = sum(t.reward is not None for t in trajectories)
    console.print(
        f"[green]{len(trajectories)} trajectories[/green] ({rewarded} with a reward) -> {escape(str(out))}"
    )
    left_out = ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in skipped.items() if n)
    console.print(
        f"[green]{len(found)} scenarios[/green] -> {escape(str(scenarios_path))}"
        + (f" (left out: {left_out})" if left_out else "")
    )
