"""The backend's command line: ``serve`` (the same command as ``art-adapters serve``).

It lives with the backend so ``python -m art_adapters_backend serve`` (what LocalBackend starts)
never imports the applications layer; ``art_adapters.apps`` mounts :func:`serve` on its CLI. Its options
are :class:`~.config.ServeConfig`'s fields. Importing this module is light: the server loads when it runs.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer
from rich.console import Console

from art_adapters.cli_options import Setting, build_config, config_command, every_setting, exit_on

from .config import ServeConfig

__all__ = ["SERVE_OPTIONS", "app", "configure_logging", "serve"]

console = Console()

#: ``serve``'s options: one per ServeConfig field (ServeLimits' under "Limits"), its name, type, default,
#: bounds and help read off the field, so a new field is a new flag; only other names and extras here.
SERVE_OPTIONS = every_setting(
    ServeConfig,
    [
        Setting("api_key", extra={"envvar": "ART_ADAPTERS_API_KEY"}),
        Setting("allowed_hosts", decls=("--allowed-host",), extra={"metavar": "NAME"}),
        Setting("export_roots", decls=("--export-root",), extra={"metavar": "DIR"}),
    ],
    panels={"limits": "Limits"},
)


@config_command(ServeConfig, SERVE_OPTIONS, ranges=True)
def serve(**options: Any) -> None:
    """Run the backend: the OpenAI-compatible API plus registration, token records and training."""
    try:
        from art_adapters_backend.serve import run_server
    except ImportError as exc:
        console.print(f"[red]the backend is not installed ({exc}): pip install 'art-adapters[backend]'[/red]")
        raise typer.Exit(code=2) from exc
    with exit_on(console, ValueError):
        config = build_config(ServeConfig, options, SERVE_OPTIONS)
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
