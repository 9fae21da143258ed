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

__all__ = ["app"]

app = typer.Typer(
    name="art-adapters",
    help="Train the open model behind a LangGraph + MCP agent with RL (GRPO + RULER).",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug messages.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _limit(help: str, min_value: int = 1) -> typer.models.OptionInfo:
    """One of ``serve``'s limit flags (``None``: the server's default, named in ``help``)."""
    return typer.Option(min=min_value, help=help, rich_help_panel="Limits")


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind. Anything but 127.0.0.1/localhost requires --api-key.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind; 0 picks a free one.")] = 8000,
    run_dir: Annotated[
        Path, typer.Option(help="Run directory: registry, token records, checkpoints. Survives restarts.")
    ] = Path(".art/backend"),
    base_model: Annotated[
        str,
        typer.Option(
            help="Base model: 'smollm2-135m-instruct' (bundled), a Hugging Face model folder, or a Hub id "
            "already in the local Hugging Face cache (nothing is downloaded)."
        ),
    ] = "smollm2-135m-instruct",
    api_key: Annotated[
        str | None,
        typer.Option(envvar="ART_ADAPTERS_API_KEY", help="Require this key (Authorization: Bearer) on every request."),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            metavar="NAME",
            help="Without --api-key only requests addressed to 127.0.0.1, localhost or [::1] (and loopback "
            "browser Origins) are answered, a guard against DNS rebinding; also accept this host name "
            "(repeat; '*': any). Ignored with --api-key.",
        ),
    ] = None,
    port_file: Annotated[
        Path | None, typer.Option(help="Write the bound port to this file once serving (useful with --port 0).")
    ] = None,
    parent_pid: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Stop when the process with this pid ends, however it ends (also when a pipe given as stdin "
            "closes); LocalBackend passes its own.",
        ),
    ] = None,
    engine: Annotated[
        str, typer.Option(help="Inference engine: 'torch' (CPU/CUDA, in process) or 'vllm' (CUDA, own process).")
    ] = "torch",
    trainer: Annotated[str, typer.Option(help="LoRA trainer: 'peft' or 'unsloth' (CUDA).")] = "peft",
    device: Annotated[str, typer.Option(help="Torch device of the engine and trainer: 'cpu', 'cuda'.")] = "cpu",
    max_batch_size: Annotated[
        int, typer.Option(min=1, help="Most sequences decoded together (requests join a running batch).")
    ] = 8,
    max_loaded_adapters: Annotated[
        int, typer.Option(min=1, help="Most LoRA checkpoints kept in memory; the least recently used idle one goes.")
    ] = 8,
    default_max_tokens: Annotated[
        int, typer.Option(min=1, help="New tokens per choice when a request sets no max_tokens.")
    ] = 512,
    max_n: Annotated[int, typer.Option(min=1, help="Largest 'n' (choices per request) accepted.")] = 16,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Cache of the bundled model's converted weights (default ~/.cache/art-adapters).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="Server log level: debug, info, warning, error.")] = "info",
    chat_template: Annotated[
        str | None,
        typer.Option(
            help="Jinja chat template file (or the template text) rendering every prompt, as vLLM's "
            "--chat-template. Default: the model's own; for the bundled model, the tool template shipped with it."
        ),
    ] = None,
    tool_call_parser: Annotated[
        str | None,
        typer.Option(help="Tool-call syntax, as vLLM's --tool-call-parser: hermes, llama3_json. Default: from the template."),
    ] = None,
    reasoning_parser: Annotated[
        str | None,
        typer.Option(help="Reasoning syntax, as vLLM's --reasoning-parser: qwen3, deepseek_r1. Default: from the template."),
    ] = None,
    max_request_bytes: Annotated[
        int | None, _limit("Largest request body in bytes (413 beyond; training has its own). Default 4 MiB.")
    ] = None,
    max_train_request_bytes: Annotated[
        int | None, _limit("Largest body of a train request, in bytes. Default 64 MiB.")
    ] = None,
    max_tools: Annotated[int | None, _limit("Most tools in one chat request. Default 128.")] = None,
    max_schema_bytes: Annotated[
        int | None, _limit("Largest JSON schema (tool parameters, response_format), in bytes. Default 64 KiB.")
    ] = None,
    max_schema_depth: Annotated[
        int | None, _limit("Deepest nesting of such a schema (objects and arrays). Default 64.")
    ] = None,
    max_request_tokens: Annotated[
        int | None, _limit("Most n x max_tokens x (1 + top_logprobs) per chat request (400 beyond). Default 262144.")
    ] = None,
    max_concurrent_requests: Annotated[
        int | None, _limit("Most chat completions in progress (429 + Retry-After beyond). Default 256.")
    ] = None,
    max_queued_sequences: Annotated[
        int | None,
        _limit("Most choices waiting for a batch slot (429 + Retry-After beyond). Default 1024.", min_value=0),
    ] = None,
    max_lora_rank: Annotated[int | None, _limit("Largest lora_rank a train request may ask for. Default 256.")] = None,
    max_micro_batch_size: Annotated[
        int | None, _limit("Largest micro_batch_size of a train request. Default 64.")
    ] = None,
    max_train_sequence_length: Annotated[
        int | None, _limit("Largest max_sequence_length of a train request, in tokens. Default 32768.")
    ] = None,
    max_train_groups: Annotated[int | None, _limit("Most trajectory groups in one train request. Default 1024.")] = None,
) -> None:
    """Run the backend: the OpenAI-compatible API plus registration, token records and training."""
    limits = {name: value for name, value in {
        "max_request_bytes": max_request_bytes, "max_train_request_bytes": max_train_request_bytes,
        "max_tools": max_tools, "max_schema_bytes": max_schema_bytes, "max_schema_depth": max_schema_depth,
        "max_request_tokens": max_request_tokens, "max_concurrent_requests": max_concurrent_requests,
        "max_queued_sequences": max_queued_sequences, "max_lora_rank": max_lora_rank,
        "max_micro_batch_size": max_micro_batch_size, "max_train_sequence_length": max_train_sequence_length,
        "max_train_groups": max_train_groups,
    }.items() if value is not None}  # fmt: skip
    try:
        from art_adapters_backend.config import ServeConfig
        from art_adapters_backend.serve import run_server
    except ImportError as exc:
        console.print(f"[red]the backend is not installed ({exc}): pip install 'art-adapters[backend]'[/red]")
        raise typer.Exit(code=2) from exc
    try:
        config = ServeConfig(
            host=host, port=port, run_dir=run_dir, base_model=base_model, api_key=api_key, port_file=port_file,
            allowed_hosts=tuple(allowed_host or ()), parent_pid=parent_pid,
            engine=engine, trainer=trainer, device=device, max_batch_size=max_batch_size,
            max_loaded_adapters=max_loaded_adapters, default_max_tokens=default_max_tokens, max_n=max_n,
            cache_dir=cache_dir, log_level=log_level, chat_template=chat_template,
            tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser, limits=limits,
        )  # fmt: skip
    except ValueError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(code=2) from exc
    run_server(config)


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
