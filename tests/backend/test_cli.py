"""``serve``'s command line is ServeConfig's fields: one flag per field (ServeLimits' under "Limits"),
with the field's default, bounds and description, and every flag's value reaches the config."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from art_adapters.cli_options import build_config
from art_adapters_backend.cli import SERVE_OPTIONS, app
from art_adapters_backend.config import ServeConfig
from art_adapters_backend.limits import ServeLimits

#: Flags whose name is not the field's, as scripts and LocalBackend spell them.
RENAMED = {"allowed_hosts": "--allowed-host", "export_roots": "--export-root"}


def serve_command() -> Any:
    return typer.main.get_command(app).commands["serve"]


def leaf_fields() -> dict[str, tuple[type[BaseModel], str]]:
    """``option name -> (model, field)`` for every ServeConfig field, ServeLimits' in place of ``limits``."""
    fields = {name: (ServeConfig, name) for name in ServeConfig.model_fields if name != "limits"}
    return {**fields, **{name: (ServeLimits, name) for name in ServeLimits.model_fields}}


def options() -> list[Any]:
    return [p for p in serve_command().params if p.param_type_name == "option" and p.name != "help"]


def test_every_field_is_a_flag_with_its_default_and_help() -> None:
    params = {p.name: p for p in options()}
    assert set(params) == set(leaf_fields()) and len(SERVE_OPTIONS) == len(params)
    for name, (model, field) in leaf_fields().items():
        info, option = model.model_fields[field], params[name]
        assert option.help == info.description and info.description, name
        assert option.opts == [RENAMED.get(name, "--" + name.replace("_", "-"))], name
        default = info.get_default(call_default_factory=True)
        assert option.default == default, name
        assert option.rich_help_panel == ("Limits" if model is ServeLimits else None), name
    assert params["api_key"].envvar == "ART_ADAPTERS_API_KEY"
    assert params["allowed_hosts"].multiple and params["allowed_hosts"].metavar == "NAME"
    assert params["export_roots"].multiple and params["export_roots"].metavar == "DIR"


def test_a_flags_bounds_and_choices_are_the_fields() -> None:
    params = {p.name: p for p in options()}
    assert (params["port"].min, params["port"].max) == (0, 65535)
    assert params["parent_pid"].min == 1 and params["max_n"].min == 1  # PositiveInt (| None)
    assert params["max_queued_sequences"].min == 0 and params["max_tools"].max == 4096
    assert params["graceful_shutdown_s"].min == 0 and params["host"].min is None
    result = CliRunner().invoke(app, ["serve", "--max-tools", "0"])
    assert result.exit_code == 2 and "Invalid value for '--max-tools'" in result.output  # before any server
    result = CliRunner().invoke(app, ["serve", "--log-level", "loud"])
    assert result.exit_code == 2 and "'loud' is not one of" in " ".join(result.output.split())


def _other_value(name: str, model: type[BaseModel], tmp_path: Path) -> str:
    """A value of field *name* other than its default, as typed on the command line."""
    info = model.model_fields[name]
    default, kind = info.get_default(call_default_factory=True), str(info.annotation)
    if typing.get_origin(info.annotation) is typing.Literal:
        return next(choice for choice in typing.get_args(info.annotation) if choice != default)
    if "Path" in kind:
        return str(tmp_path / name)
    if "int" in kind or "float" in kind:
        return str((default or 0) + 1)
    return "localhost" if name == "host" else f"{name}-value"


def test_every_flags_value_reaches_the_config(tmp_path: Path) -> None:
    fields = leaf_fields()
    argv: list[str] = []
    for param in options():
        model, field = fields[param.name]
        if getattr(param, "is_flag", False):  # --x/--no-x: the one that is not the default
            default = model.model_fields[field].get_default(call_default_factory=True)
            argv.append(param.secondary_opts[0] if default else param.opts[0])
        else:
            argv += [param.opts[0], _other_value(param.name, model, tmp_path)]
    parsed = serve_command().make_context("serve", argv).params
    config = build_config(ServeConfig, parsed, SERVE_OPTIONS)
    for name, (model, field) in fields.items():
        value = getattr(config.limits if model is ServeLimits else config, field)
        value = config.api_key_value if name == "api_key" else value
        assert (list(value) if isinstance(value, tuple) else value) == parsed[name], name
        assert value != model.model_fields[field].get_default(call_default_factory=True), name


def test_serve_refuses_an_invalid_config_with_its_message() -> None:
    """The config's own check runs on the flags' values: exit 2 and the message, no server."""
    pytest.importorskip("uvicorn")
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0"], env={"ART_ADAPTERS_API_KEY": None})
    assert result.exit_code == 2 and "not a loopback address" in result.output


def test_help_names_every_flag() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for param in options():
        assert param.opts[0] in result.output, param.name
    assert "Limits" in result.output and "ART_ADAPTERS_API_KEY" in result.output
