"""The ``art-adapters`` command line: ``serve`` runs the backend, ``demo`` runs the main job.

Progress display and printing belong here, not in the library.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
from art_adapters_backend.cli import configure_logging, serve
from rich.console import Console
from rich.markup import escape

from art_adapters import ArtAdaptersError, ConfigError
from art_adapters.observe import plot_run

from ._calibrate import CALIBRATE_HELP, calibrate_command
from ._demo import DemoConfig, run_demo
from ._demo_config import DEMO_LOOP_SETTINGS
from ._import import IMPORT_HELP, import_traces
from ._options import Setting, build_config, config_command, exit_on, quiet_http_logs
from ._sft import SFT_HELP, SFT_OPTIONS, SftCommand, run_sft
from ._sft import report as sft_report
from ._train_mcp import TrainMcpConfig, report, run_train_mcp

__all__ = ["app"]

app = typer.Typer(
    name="art-adapters",
    help="Train the open model behind a LangGraph + MCP agent with RL (GRPO + RULER).",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
app.command()(serve)  # the backend's own command: it runs without the applications layer
app.callback()(configure_logging)
app.command("import", help=IMPORT_HELP)(import_traces)
app.command("calibrate", help=CALIBRATE_HELP)(calibrate_command)

_quiet_http_logs = quiet_http_logs


#: ``demo``'s flags in help order: DemoConfig's own fields and the loop settings it offers
#: (:data:`DEMO_LOOP_SETTINGS`: ``--groups`` is ``loop.groups_per_step``...).
_DEMO_FLAGS = (
    "run_dir", "steps", "groups", "rollouts", "eval_size", "eval_samples", "train_size", "temperature",
    "eval_temperature", "learning_rate", "lora_rank", "max_tokens", "passes", "mini_batches", "loss",
    "loss_normalization", "dynamic_sampling", "scripted_imitation", "eval_every", "max_staleness", "seed",
    "threads", "no_judge", "question",
)  # fmt: skip

#: ``demo``'s options: defaults from DemoConfig (the loop's from :func:`default_demo_loop`), help from its
#: descriptions and DEMO_LOOP_SETTINGS.
DEMO_OPTIONS = [
    DEMO_LOOP_SETTINGS.get(name) or Setting(name, decls=("--no-judge",) if name == "no_judge" else ())
    for name in _DEMO_FLAGS
]


@app.command()
@config_command(DemoConfig, DEMO_OPTIONS)
def demo(**options: Any) -> None:
    """Train a LangGraph ReAct agent on the bundled calculator MCP server (CPU, ~8 min), before/after.

    Evaluates the model on held-out addition questions, trains a few GRPO steps (rewards:
    RULER when $ART_ADAPTERS_JUDGE_MODEL [+ _BASE_URL, _API_KEY] or $OPENAI_API_KEY is set,
    else the verifiable check), evaluates again, prints the table, writes RUN_DIR/plots/reward.png
    and answers --question through the trained model in the same graph.
    """
    _quiet_http_logs()
    with exit_on(console, ArtAdaptersError, ValueError):
        config = build_config(DemoConfig, options, DEMO_OPTIONS)
        asyncio.run(run_demo(config, console=console))


@app.command()
def plot(
    run: Annotated[Path, typer.Argument(help="A run directory holding metrics.jsonl, or the metrics file itself.")],
    out: Annotated[Path | None, typer.Option(help="Where to write the PNGs; default RUN/plots.")] = None,
) -> None:
    """Write PNG charts of a run's metrics history: reward curve with its spread, loss, KL."""
    with exit_on(console, ConfigError):
        paths = plot_run(run, out)
    for path in paths:
        console.print(str(path))


#: ``train-mcp``'s options, in help order: TrainMcpConfig fields and the loop settings it offers.
TRAIN_MCP_OPTIONS = [
    Setting("server", argument=True),
    Setting("state", decls=("--state",), extra={"metavar": "SOURCE=ENV|FLAG"}),
    Setting("cwd", extra={"metavar": "DIR|{state:SOURCE}"}),
    Setting("scenarios"),
    Setting("n_scenarios"),
    Setting("max_retries"),
    Setting("context_tokens"),
    Setting("run_dir"),
    Setting("loop.steps"),
    Setting("loop.groups_per_step"),
    Setting("loop.rollouts_per_group"),
    Setting("loop.eval_every"),
    Setting("loop.eval_rollouts"),
    Setting(
        "loop.max_staleness",
        extra={"help": "0: sequential. k >= 1: pipelined RL; a group trains only if sampled at most k steps before."},
    ),
    Setting("val_fraction"),
    Setting("tools", decls=("--tools",), extra={"metavar": "NAME"}),
    Setting("exclude_tools", decls=("--exclude-tools",), extra={"metavar": "NAME"}),
    Setting("first_tool_choice", extra={"metavar": "required|auto|NAME"}),
    Setting("max_arg_chars"),
    Setting("max_arg_items"),
    Setting("pin_arg", decls=("--pin-arg",), extra={"metavar": "NAME=VALUE"}),
    Setting("max_turns"),
    Setting("max_tokens"),
    Setting("model_name"),
    Setting("base_model"),
    Setting("backend_url"),
    Setting("threads"),
    Setting("ray_address"),
    Setting("api_key", extra={"envvar": "ART_ADAPTERS_API_KEY", "show_default": False}),
    Setting("reward", extra={"metavar": "judge|tools|judge+tools", "show_default": False}),
    Setting("judge_model"),
    Setting("judge_base_url"),
    Setting("judge_api_key", extra={"show_default": False}),
    Setting("temperature"),
    Setting("eval_temperature"),
    Setting("loop.train.learning_rate"),
    Setting("system_prompt", extra={"show_default": False}),
    Setting("seed"),
]


@app.command("train-mcp")
@config_command(TrainMcpConfig, TRAIN_MCP_OPTIONS)
def train_mcp(**options: Any) -> None:
    """Train an agent to master an MCP server's tools: scenarios, ReAct agent, RULER rewards, GRPO."""
    _quiet_http_logs()
    with exit_on(console, ArtAdaptersError, ValueError):
        config = build_config(TrainMcpConfig, options, TRAIN_MCP_OPTIONS)
        result = asyncio.run(run_train_mcp(config, console=console))
    report(result, console)
    if result.stopped:  # the loop gave up: say so last, and fail
        raise typer.Exit(code=1)


@app.command("sft", help=SFT_HELP)
@config_command(SftCommand, SFT_OPTIONS)
def sft(**options: Any) -> None:
    """One SFT step on a trajectories file (see ``SFT_HELP``)."""
    _quiet_http_logs()
    with exit_on(console, ArtAdaptersError, ValueError):
        command = build_config(SftCommand, options, SFT_OPTIONS)
        result = asyncio.run(run_sft(command, console=console))
    sft_report(result, command, console)
    if not result.trained:
        raise typer.Exit(code=1)


_EXPORT_HELP = (
    "Export a checkpoint for vLLM: a PEFT LoRA adapter folder (default) or a merged model (--merged).\n\n"
    "The folder carries the tokenizer with the chat template every training prompt was rendered with, and a "
    "README.md with the exact `vllm serve` line (--enable-lora --lora-modules, --chat-template, "
    "--tool-call-parser) that serves it with the same prompts and parsers. Step 0 (the base weights) "
    "exports only with --merged. Works offline on the run directory; from Python: `await model.export(out)`."
)


@app.command("export", help=_EXPORT_HELP)
def export(
    model: Annotated[
        str,
        typer.Argument(metavar="NAME[@STEP]", help="A trained model, optionally '@' a step (default: latest)."),
    ],
    out: Annotated[
        Path,
        typer.Argument(metavar="OUT", help="The folder to write (created; must be empty unless --force)."),
    ],
    merged: Annotated[
        bool, typer.Option("--merged", help="Write a full model with the adapter merged in (safetensors).")
    ] = False,
    run_dir: Annotated[
        Path, typer.Option(help="The backend's run directory (serve --run-dir); the backend need not run.")
    ] = Path(".art/backend"),
    force: Annotated[
        bool, typer.Option("--force", help="Replace OUT if it exists and is not empty.")
    ] = False,
) -> None:
    """Export checkpoint NAME[@STEP] of a run directory into OUT (see ``_EXPORT_HELP`` and docs/export.md)."""
    try:
        from art_adapters_backend.bundled import BundledModelError
        from art_adapters_backend.serving import EXPORT_MANIFEST, export_checkpoint, parse_model_ref
    except ImportError as exc:
        console.print(f"[red]export needs the backend ({exc}): pip install 'art-adapters[backend]'[/red]")
        raise typer.Exit(code=2) from exc
    with exit_on(console, ValueError, OSError, BundledModelError):  # ExportError is a ValueError
        name, step = parse_model_ref(model)
        kind = "a merged model" if merged else "a LoRA adapter"
        with console.status(f"exporting {escape(model)} from {escape(str(run_dir))} as {kind}..."):
            path = export_checkpoint(run_dir, name, step, out=out, merged=merged, force=force)
    manifest = json.loads((path / EXPORT_MANIFEST).read_text(encoding="utf-8"))
    console.print(f"[green]exported {name}@{manifest['step']} ({kind}) to {escape(str(path))}[/green]")
    console.print("serve it with vLLM (see README.md there):")
    console.print(shlex.join(manifest["vllm_command"]), markup=False, highlight=False, soft_wrap=True)


if __name__ == "__main__":  # pragma: no cover
    app()
