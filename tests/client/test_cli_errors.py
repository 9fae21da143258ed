"""The command line prints an error's message as written: text in ``[...]`` (a path, a list, a JSON
snippet) is not taken as rich markup, and the command exits 2. One helper (``exit_on``) does it for
every command."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from art_adapters import ConfigError
from art_adapters.apps import app
from art_adapters.apps._options import exit_on


def test_exit_on_prints_brackets_literally_and_exits_2() -> None:
    console = Console(record=True, width=200)
    with pytest.raises(typer.Exit) as info, exit_on(console, ConfigError):
        raise ConfigError("tools [bold]add[/bold] and [red] are unknown; expected one of ['mul']")
    assert info.value.exit_code == 2
    assert "tools [bold]add[/bold] and [red] are unknown; expected one of ['mul']" in console.export_text()


def test_other_errors_pass_through() -> None:
    with pytest.raises(KeyError), exit_on(Console(), ConfigError):
        raise KeyError("not ours to print")


def test_a_command_prints_a_bracketed_path_as_written(tmp_path: Path) -> None:
    run = tmp_path / "[bold]run [x]"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    result = CliRunner().invoke(app, ["plot", str(run)], terminal_width=400)
    assert result.exit_code == 2, result.output
    # compared without white space: the CLI's console wraps at its own width (80 here), and where the
    # wraps fall (on the path's space, inside a long word) depends on the temporary folder's name
    flat = "".join(result.output.split())
    assert "[bold]run[x]/metrics.jsonl" in flat, result.output
    assert "hasnometricrowsyet" in flat, result.output
