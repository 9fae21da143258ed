"""``art_adapters.cli_options``: a config model's fields as typer options, and the parsed options back
into the model (the builder behind ``serve``, ``demo``, ``train-mcp``, ``sft`` and ``calibrate``)."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from pydantic import BaseModel, Field, PositiveInt, SecretStr
from typer.testing import CliRunner

from art_adapters.cli_options import Setting, build_config, config_command, every_setting


class Inner(BaseModel):
    """A nested settings model."""

    depth: int = Field(default=3, gt=0, lt=10, description="How deep.")
    ratio: float = Field(default=0.5, gt=0, le=1, description="A share.")


class Outer(BaseModel):
    """A command's settings."""

    name: str = Field(default="x", description="A name.")
    key: SecretStr | None = Field(default=None, description="A secret.")
    tags: tuple[str, ...] = Field(default=(), description="A tag (repeat).")
    pid: PositiveInt | None = Field(default=None, description="A pid.")
    inner: Inner = Field(default_factory=Inner)


SETTINGS = every_setting(Outer, [Setting("tags", decls=("--tag",))], panels={"inner": "Inner"})


def command() -> tuple[typer.Typer, list[Outer]]:
    app = typer.Typer()
    seen: list[Outer] = []

    @app.command()
    @config_command(Outer, SETTINGS, ranges=True)
    def run(**options: Any) -> None:
        seen.append(build_config(Outer, options, SETTINGS))

    return app, seen


def test_every_field_is_a_setting_and_a_nested_models_fields_stand_in_its_place() -> None:
    assert [s.path for s in SETTINGS] == ["name", "key", "tags", "pid", "inner.depth", "inner.ratio"]
    assert SETTINGS[2].decls == ("--tag",)
    assert SETTINGS[4].extra == {"rich_help_panel": "Inner"} and SETTINGS[0].extra == {}
    with pytest.raises(ValueError, match="no field nope"):
        every_setting(Outer, [Setting("nope")])


def test_the_options_parse_into_the_model_with_the_fields_bounds() -> None:
    app, seen = command()
    params = {p.name: p for p in typer.main.get_command(app).params}
    assert (params["depth"].min, params["depth"].max) == (1, 9)  # gt=0, lt=10 on an int
    assert (params["ratio"].min, params["ratio"].max) == (0, 1) and params["pid"].min == 1
    assert params["tags"].multiple and params["depth"].default == 3 and params["name"].help == "A name."
    argv = ["--name", "y", "--key", "k", "--tag", "a", "--tag", "b", "--pid", "7", "--depth", "4"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    (config,) = seen
    assert config.key is not None and config.key.get_secret_value() == "k"
    assert (config.name, config.tags, config.pid, config.inner) == ("y", ("a", "b"), 7, Inner(depth=4))
    refused = CliRunner().invoke(app, ["--depth", "10"])
    assert refused.exit_code == 2 and "--depth" in refused.output and not seen[1:]


def test_without_ranges_the_model_checks_the_bounds() -> None:
    settings = every_setting(Inner)

    @config_command(Inner, settings)
    def run(**options: Any) -> None:
        build_config(Inner, options, settings)

    app = typer.Typer()
    app.command()(run)
    params = {p.name: p for p in typer.main.get_command(app).params}
    assert params["depth"].min is None and params["ratio"].max is None
