"""The ``art-adapters`` command line: ``serve`` runs the backend, ``demo`` runs the main job.

Progress display and printing belong here, not in the library.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from art_adapters_backend.cli import serve

__all__ = ["app"]

app = typer.Typer(
    name="art-adapters",
    help="Train the open model behind a LangGraph + MCP agent with RL (GRPO + RULER).",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
app.command()(serve)  # the backend's own command: it runs without the applications layer


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug messages.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@app.command()
def demo(
    run_dir: Annotated[Path, typer.Option(help="Backend data, metrics.jsonl and plots/; a rerun continues training.")] = Path(
        ".art/demo"
    ),
    steps: Annotated[int, typer.Option(help="GRPO steps to train (0: evaluate only). About 1 min each on 2 cores.")] = 8,
    groups: Annotated[int, typer.Option(help="Training questions per step.")] = 3,
    rollouts: Annotated[int, typer.Option(help="Rollouts per question (the GRPO group size, >= 2).")] = 4,
    eval_size: Annotated[int, typer.Option(help="Held-out questions evaluated before and after training.")] = 12,
    eval_samples: Annotated[int, typer.Option(help="Samples per held-out question.")] = 4,
    train_size: Annotated[int, typer.Option(help="Training questions (cycled through).")] = 32,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of training rollouts.")] = 1.0,
    eval_temperature: Annotated[float, typer.Option(help="Sampling temperature of the evaluation (0: greedy).")] = 1.0,
    learning_rate: Annotated[float, typer.Option(help="LoRA learning rate.")] = 5e-4,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per model turn.")] = 48,
    seed: Annotated[int, typer.Option(help="Seed of the questions, the split and training.")] = 0,
    threads: Annotated[
        int | None, typer.Option(help="Torch threads of the embedded backend (default: all cores).")
    ] = None,
    no_judge: Annotated[
        bool, typer.Option("--no-judge", help="Score with the verifiable check even if a judge is configured.")
    ] = False,
    question: Annotated[str, typer.Option(help="Asked at the end through the trained model.")] = "What is 345 + 278?",
) -> None:
    """Train a LangGraph ReAct agent on the bundled calculator MCP server (CPU, ~8 min), before/after.

    Evaluates the model on held-out addition questions, trains a few GRPO steps (rewards:
    RULER when $ART_ADAPTERS_JUDGE_MODEL [+ _BASE_URL, _API_KEY] or $OPENAI_API_KEY is set,
    else the verifiable check), evaluates again, prints the table, writes RUN_DIR/plots/reward.png
    and answers --question through the trained model in the same graph.
    """
    settings = dict(locals())
    from ._demo import DemoConfig, run_demo

    if not logging.getLogger().isEnabledFor(logging.DEBUG):  # one line per HTTP request drowns the progress
        for name in ("httpx", "httpx2"):
            logging.getLogger(name).setLevel(logging.WARNING)
    from art_adapters._errors import ArtAdaptersError

    try:
        config = DemoConfig(**settings)
        asyncio.run(run_demo(config, console=console))
    except (ArtAdaptersError, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(code=2) from exc


@app.command()
def plot(
    run: Annotated[Path, typer.Argument(help="A run directory holding metrics.jsonl, or the metrics file itself.")],
    out: Annotated[Path | None, typer.Option(help="Where to write the PNGs; default RUN/plots.")] = None,
) -> None:
    """Write PNG charts of a run's metrics history: reward curve with its spread, loss, KL."""
    from art_adapters._errors import ConfigError
    from art_adapters.observe._plot import plot_run

    try:
        paths = plot_run(run, out)
    except ConfigError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(code=2) from exc
    for path in paths:
        console.print(str(path))


@app.command("train-mcp")
def train_mcp(
    server: Annotated[
        str,
        typer.Argument(
            help="The MCP server: a stdio command ('python -m mcp_tools.servers.notes') or an HTTP URL."
        ),
    ],
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            metavar="SOURCE=ENV|FLAG",
            help=(
                "A file or folder the stdio server keeps its data in, copied fresh for every rollout (and "
                "deleted after it) so rollouts never see each other's writes and the original stays "
                "unchanged. SOURCE=ENV sets the server's environment variable ENV to the copy's path "
                "(./memory.jsonl=MEMORY_FILE_PATH); SOURCE=--flag appends '--flag COPY' to its arguments "
                "(./repo=--repository). Repeat for several; or write {state:SOURCE} in the server command. "
                "Not for HTTP servers."
            ),
        ),
    ] = None,
    scenarios: Annotated[
        Path | None, typer.Option(help="Load scenarios from this JSONL file instead of generating them.")
    ] = None,
    n_scenarios: Annotated[
        int,
        typer.Option(
            help="Scenarios to generate when --scenarios is not given; each is saved as it is accepted, "
            "and a rerun generates only the missing ones."
        ),
    ] = 24,
    max_retries: Annotated[
        int,
        typer.Option(
            help="Further scenario-generator calls allowed after calls that kept no new scenario "
            "(a call that keeps one uses no retry)."
        ),
    ] = 3,
    context_tokens: Annotated[
        int | None,
        typer.Option(
            help="The scenario generator's context length in tokens (default: asked from its endpoint); "
            "its prompt is fitted to it."
        ),
    ] = None,
    run_dir: Annotated[Path, typer.Option(help="Run directory: scenarios, backend, metrics, plots.")] = Path(
        ".art/mcp-rl"
    ),
    steps: Annotated[
        int, typer.Option(help="Train until the model is at this step (a rerun resumes); 0 only evaluates.")
    ] = 4,
    groups_per_step: Annotated[int, typer.Option(help="Scenarios per training step.")] = 2,
    rollouts_per_group: Annotated[
        int, typer.Option(help="Rollouts per scenario (GRPO group size, >= 2).")
    ] = 4,
    eval_every: Annotated[int, typer.Option(help="Evaluate on the validation split every N steps.")] = 2,
    val_fraction: Annotated[float, typer.Option(help="Share of scenarios held out for validation.")] = 0.25,
    tools: Annotated[
        list[str] | None,
        typer.Option("--tools", metavar="NAME", help="Offer only this tool to the agent (repeat; default: all)."),
    ] = None,
    exclude_tools: Annotated[
        list[str] | None,
        typer.Option("--exclude-tools", metavar="NAME", help="Never offer this tool (repeat)."),
    ] = None,
    first_tool_choice: Annotated[
        str,
        typer.Option(
            metavar="required|auto|NAME",
            help="tool_choice of each rollout's first model turn: 'required' makes the agent call some tool "
            "(a small model rarely calls one unprompted, and RL cannot reward what it never tries), 'auto' "
            "lets it decide, a tool's name forces that tool. Later turns are 'auto'.",
        ),
    ] = "required",
    max_turns: Annotated[int, typer.Option(help="Most model turns per rollout.")] = 4,
    max_tokens: Annotated[int, typer.Option(help="Most tokens per model turn.")] = 128,
    model_name: Annotated[str, typer.Option(help="The trainable model's name.")] = "mcp-agent",
    base_model: Annotated[str, typer.Option(help="Base weights: bundled name or a model folder.")] = (
        "smollm2-135m-instruct"
    ),
    backend_url: Annotated[
        str | None,
        typer.Option(help="A running backend (art-adapters serve); default: start the embedded one."),
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="ART_ADAPTERS_API_KEY", help="The backend's API key.")
    ] = None,
    judge_model: Annotated[
        str | None,
        typer.Option(
            help="RULER judge and scenario writer; default $ART_ADAPTERS_JUDGE_MODEL, else the base model."
        ),
    ] = None,
    judge_base_url: Annotated[
        str | None,
        typer.Option(help="The judge's OpenAI-compatible endpoint (or $ART_ADAPTERS_JUDGE_BASE_URL)."),
    ] = None,
    judge_api_key: Annotated[
        str | None, typer.Option(help="The judge endpoint's key (or $ART_ADAPTERS_JUDGE_API_KEY).")
    ] = None,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of training rollouts.")] = 1.0,
    learning_rate: Annotated[float, typer.Option(help="LoRA learning rate.")] = 2e-4,
    system_prompt: Annotated[
        str | None, typer.Option(help="The agent's system prompt (a worked example helps a small model).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the train/validation split.")] = 0,
) -> None:
    """Train an agent to master an MCP server's tools: scenarios, ReAct agent, RULER rewards, GRPO."""
    settings = {
        k: v
        for k, v in locals().items()
        if v is not None or k not in ("system_prompt", "state", "exclude_tools")
    }
    if not logging.getLogger().isEnabledFor(logging.DEBUG):  # keep the progress lines readable
        for name in ("httpx", "httpx2"):
            logging.getLogger(name).setLevel(logging.WARNING)
    from art_adapters._errors import ArtAdaptersError
    from ._train_mcp import TrainMcpConfig, report, run_train_mcp

    try:
        config = TrainMcpConfig(**settings)
        result = asyncio.run(run_train_mcp(config, console=console))
    except (ArtAdaptersError, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(code=2) from exc
    report(result, console)
    if result.stopped:  # the loop gave up: say so last, and fail
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
    import json
    import shlex

    from rich.markup import escape

    try:
        from art_adapters_backend.bundled import BundledModelError
        from art_adapters_backend.export import EXPORT_MANIFEST, export_checkpoint, parse_model_ref
    except ImportError as exc:
        console.print(f"[red]export needs the backend ({exc}): pip install 'art-adapters[backend]'[/red]")
        raise typer.Exit(code=2) from exc
    try:
        name, step = parse_model_ref(model)
        kind = "a merged model" if merged else "a LoRA adapter"
        with console.status(f"exporting {escape(model)} from {escape(str(run_dir))} as {kind}..."):
            path = export_checkpoint(run_dir, name, step, out=out, merged=merged, force=force)
    except (ValueError, OSError, BundledModelError) as exc:  # ExportError is a ValueError
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(code=2) from exc
    manifest = json.loads((path / EXPORT_MANIFEST).read_text(encoding="utf-8"))
    console.print(f"[green]exported {name}@{manifest['step']} ({kind}) to {escape(str(path))}[/green]")
    console.print("serve it with vLLM (see README.md there):")
    console.print(shlex.join(manifest["vllm_command"]), markup=False, highlight=False, soft_wrap=True)


if __name__ == "__main__":  # pragma: no cover
    app()
