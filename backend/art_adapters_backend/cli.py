"""The backend's command line: ``serve`` (the same command as ``art-adapters serve``).

It lives with the backend so ``python -m art_adapters_backend serve`` (what LocalBackend starts)
never imports the applications layer; ``art_adapters.apps`` mounts :func:`serve` on its CLI.
Importing this module is light: the server's modules load when the command runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

__all__ = ["app", "configure_logging", "serve"]

console = Console()

def _limit(help: str, min_value: int = 1) -> typer.models.OptionInfo:
    """One of ``serve``'s limit flags (``None``: the server's default, named in ``help``)."""
    return typer.Option(min=min_value, help=help, rich_help_panel="Limits")


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
    export_root: Annotated[
        list[Path] | None,
        typer.Option(
            "--export-root",
            metavar="DIR",
            help="POST /art/models/{name}/export writes only under RUN_DIR/exports and these folders "
            "(repeat). Default: none besides RUN_DIR/exports.",
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
    prefix_cache_bytes: Annotated[
        int,
        typer.Option(
            min=0,
            help="Memory (bytes) for the torch engine's prefix cache: prompts' keys and values reused by later "
            "prompts that start the same way under the same weights (name@step); 0 turns it off. Default 256 MiB.",
        ),
    ] = 256 << 20,
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
    max_constraint_bytes: Annotated[
        int | None, _limit("Most bytes of tool schemas one forced tool call joins into a grammar. Default 128 KiB.")
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
    max_group_trajectories: Annotated[
        int | None, _limit("Most trajectories in one group of a train request. Default 256.")
    ] = None,
    max_train_iterations: Annotated[
        int | None, _limit("Largest num_iterations of a train request (inference waits meanwhile). Default 16.")
    ] = None,
    max_train_mini_batches: Annotated[
        int | None, _limit("Largest mini_batches of a train request. Default 64.")
    ] = None,
    max_sft_epochs: Annotated[int | None, _limit("Largest epochs of an SFT request. Default 16.")] = None,
) -> None:
    """Run the backend: the OpenAI-compatible API plus registration, token records and training."""
    limits = {name: value for name, value in {
        "max_request_bytes": max_request_bytes, "max_train_request_bytes": max_train_request_bytes,
        "max_tools": max_tools, "max_schema_bytes": max_schema_bytes, "max_schema_depth": max_schema_depth,
        "max_constraint_bytes": max_constraint_bytes,
        "max_request_tokens": max_request_tokens, "max_concurrent_requests": max_concurrent_requests,
        "max_queued_sequences": max_queued_sequences, "max_lora_rank": max_lora_rank,
        "max_micro_batch_size": max_micro_batch_size, "max_train_sequence_length": max_train_sequence_length,
        "max_train_groups": max_train_groups, "max_group_trajectories": max_group_trajectories,
        "max_train_iterations": max_train_iterations, "max_train_mini_batches": max_train_mini_batches,
        "max_sft_epochs": max_sft_epochs,
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
            allowed_hosts=tuple(allowed_host or ()), export_roots=tuple(export_root or ()), parent_pid=parent_pid,
            engine=engine, trainer=trainer, device=device, max_batch_size=max_batch_size,
            prefix_cache_bytes=prefix_cache_bytes, max_loaded_adapters=max_loaded_adapters, default_max_tokens=default_max_tokens, max_n=max_n,
            cache_dir=cache_dir, log_level=log_level, chat_template=chat_template,
            tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser, limits=limits,
        )  # fmt: skip
    except ValueError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(code=2) from exc
    run_server(config)


app = typer.Typer(
    name="art-adapters-backend",
    help="The art-adapters backend: OpenAI-compatible inference, token records and LoRA training.",
    no_args_is_help=True,
    add_completion=False,
)
app.command()(serve)


def configure_logging(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug messages.")] = False,
) -> None:
    """The command line's global option: log at INFO, or DEBUG with ``--verbose`` (both CLIs use it)."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


app.callback()(configure_logging)
