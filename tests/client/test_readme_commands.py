"""The README's commands run as written after its two set-up commands: every ``.venv/bin/art-adapters``
line in a ``bash`` block names a real subcommand with options it accepts, its MCP server argument
parses, and ``--help`` of every subcommand runs from the installed entry point."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import typer

from art_adapters.apps._cli import app
from mcp_tools._config import parse_servers

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = ".venv/bin/art-adapters"


def readme_commands() -> list[list[str]]:
    """The argv of every command line in the README's ``bash`` blocks, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_runs_only_the_two_setup_commands_and_the_entry_point() -> None:
    commands = readme_commands()
    assert commands[:2] == [["./dev", "demo"], ["./dev", "test"]]
    rest = commands[2:]
    assert rest and all(argv[0] == ENTRY_POINT for argv in rest), [a[0] for a in rest]
    text = (REPO / "README.md").read_text(encoding="utf-8")
    bare = re.findall(r"^art-adapters .*$", text, flags=re.MULTILINE)
    assert not bare, f"commands that need an activated environment: {bare}"


@pytest.mark.parametrize("argv", readme_commands()[2:], ids=lambda argv: " ".join(argv[1:3]))
def test_each_readme_command_parses_with_the_real_command_line(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where the examples' own data would be: ./repo, ./memory.jsonl
    (tmp_path / "repo").mkdir()
    (tmp_path / "memory.jsonl").write_text("")
    group = typer.main.get_command(app)
    with group.make_context("art-adapters", list(argv[1:]), resilient_parsing=False) as context:
        name = argv[1]
        command = group.get_command(context, name)
        assert command is not None, f"no subcommand {name!r}"
        sub = command.make_context(name, list(argv[2:]), parent=context)  # raises on an unknown option
        if name == "train-mcp":
            (spec,) = parse_servers(sub.params["server"]).values()
            assert spec is not None


def test_every_subcommand_helps_from_the_installed_entry_point() -> None:
    entry = REPO / ENTRY_POINT
    if not entry.exists():
        pytest.skip(f"{entry} is missing: run ./dev setup")
    group = typer.main.get_command(app)
    names = group.list_commands(group.make_context("art-adapters", ["--help"], resilient_parsing=True))
    assert {"demo", "serve", "train-mcp", "export"} <= set(names)
    for name in names:
        done = subprocess.run([str(entry), name, "--help"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "Usage:" in done.stdout, (name, done.stderr[-500:])
