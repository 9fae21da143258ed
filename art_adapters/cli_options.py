"""Command-line options made from config models, so each setting's default and help live in one place.

A command lists the settings it offers as :class:`Setting` paths into its config model
(``"steps"``, ``"loop.train.learning_rate"``; :func:`every_setting` lists them all); :func:`config_command`
gives it one option per setting, named after the path's last part, with the model's default and the
field's ``description`` (else its ``Attributes:`` docstring entry's first sentence) as help.
:func:`build_config` turns the parsed options back into the model. ``art-adapters`` and the backend's
``serve`` both build their options here.
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import typer
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from rich.console import Console
from rich.markup import escape

from ._config import reject_moved

__all__ = [
    "Setting",
    "build_config",
    "config_command",
    "every_setting",
    "exit_on",
    "field_help",
    "reject_moved",
]

M = TypeVar("M", bound=BaseModel)
_KEYWORD = inspect.Parameter.KEYWORD_ONLY


@dataclass(frozen=True)
class Setting:
    """One command-line option: the dotted path of a config field, and typer's extras for it.

    Attributes:
        path: ``"name"`` or ``"nested.name"`` in the command's config model; the option is ``--name``.
        decls: the option's names when not ``--name`` (``("--no-judge",)``).
        argument: a positional argument instead of an option.
        extra: more ``typer.Option``/``typer.Argument`` keywords (``metavar``, ``envvar``...).
        annotation: the option's type when not the field's own (``bool`` for a ``--cache/--no-cache``
            flag whose field also takes a path).
    """

    path: str
    decls: tuple[str, ...] = ()
    argument: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    annotation: Any = None

    @property
    def name(self) -> str:
        """The parameter's name: the path's last part."""
        return self.path.rpartition(".")[2]


def _docstring_attributes(model: type[BaseModel]) -> dict[str, str]:
    """``name -> text`` of the ``Attributes:`` sections of *model*'s docstring and its config bases'
    (Google style; a subclass's entry wins)."""
    found: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if klass is not BaseModel and issubclass(klass, BaseModel) and "__doc__" in vars(klass):
            found.update(_own_attributes(klass.__doc__ or ""))
    return found


def _own_attributes(docstring: str) -> dict[str, str]:
    doc = inspect.cleandoc(docstring)
    section = re.split(r"^Attributes:\s*$", doc, maxsplit=1, flags=re.MULTILINE)
    if len(section) < 2:
        return {}
    found: dict[str, str] = {}
    names: list[str] = []
    for line in section[1].splitlines():
        entry = re.match(r"^    (\w+(?:, \w+)*): (.*)$", line)
        if entry:  # "name: text" or "a, b: text shared by a and b"
            names = entry.group(1).split(", ")
            found.update(dict.fromkeys(names, entry.group(2)))
        elif names and line.startswith("        "):  # the entry goes on
            found.update({name: f"{found[name]} {line.strip()}" for name in names})
        elif line.strip() and not line.startswith(" "):
            break  # the next section
    return found


def _plain_rst(text: str) -> str:
    """Help text without reStructuredText markup: ``x`` and :role:`~a.b.x` become x."""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def field_help(model: type[BaseModel], name: str) -> str:
    """The help of *model*'s field *name*: its ``description``, else its docstring entry's first sentence."""
    description = model.model_fields[name].description
    if description:
        return " ".join(description.split())
    entry = _docstring_attributes(model).get(name, "")
    text = _plain_rst(" ".join(re.split(r"(?<=\.)\s+(?=[A-Z`])", entry, maxsplit=1)[0].split()))
    return text[:1].upper() + text[1:]


def _strip_annotated(annotation: Any) -> Any:
    """*annotation* without pydantic's constraints (``Annotated[int, Gt(0)] | None`` -> ``int | None``), in
    types typer parses: ``SecretStr`` as ``str``, ``tuple[X, ...]`` as ``list[X]`` (a repeated option)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _strip_annotated(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(lambda a, b: a | b, map(_strip_annotated, typing.get_args(annotation)))
    if origin is tuple and typing.get_args(annotation)[1:] == (...,):
        return list[_strip_annotated(typing.get_args(annotation)[0])]  # type: ignore[misc]
    return str if annotation is SecretStr else annotation


def _constraints(annotation: Any) -> Iterator[Any]:
    """The constraints inside *annotation*'s ``Annotated`` parts (``PositiveInt | None``: ``Gt(0)``)."""
    if typing.get_origin(annotation) is typing.Annotated:
        yield from typing.get_args(annotation)[1:]
        yield from _constraints(typing.get_args(annotation)[0])
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for member in typing.get_args(annotation):
            yield from _constraints(member)


def _range(info: FieldInfo) -> dict[str, Any]:
    """typer's ``min``/``max`` for a number field's bounds (``gt=0`` on an int: ``min=1``; a float's open
    bound is given closed, and the model refuses the bound itself)."""
    number = _strip_annotated(info.annotation)
    step = 1 if number is int or int in typing.get_args(number) else 0
    kinds = (("ge", "min", 0), ("gt", "min", step), ("le", "max", 0), ("lt", "max", -step))
    out: dict[str, Any] = {}
    for bound in [*info.metadata, *_constraints(info.annotation)]:
        for attribute, key, shift in kinds:
            if getattr(bound, attribute, None) is not None:
                out[key] = getattr(bound, attribute) + shift
    return out


def _resolve(model: type[BaseModel], path: str) -> tuple[type[BaseModel], str, Any]:
    """The model owning *path*'s last field, that field's name, and its default (``...``: required).

    A nested field's default is read from the enclosing field's default value, so a config that
    holds ``loop: LoopConfig = LoopConfig(steps=4, ...)`` offers ``--steps`` with default 4.
    """
    *parents, name = path.split(".")
    owner: type[BaseModel] = model
    value: Any = None
    for depth, part in enumerate([*parents, name]):
        info = owner.model_fields[part]
        if depth == 0:
            value = info.get_default(call_default_factory=True)
        else:
            value = getattr(value, part) if isinstance(value, BaseModel) else info.get_default(
                call_default_factory=True
            )
        if part != name:
            owner = _strip_annotated(info.annotation)
    return owner, name, (... if value is PydanticUndefined else value)


def every_setting(
    model: type[BaseModel], custom: Sequence[Setting] = (), panels: Mapping[str, str] | None = None
) -> list[Setting]:
    """One :class:`Setting` per field of *model*, in field order, so a new field is a new option.

    A field holding a model gives one per field of that model instead (path ``"limits.max_tools"``),
    shown under the help panel ``panels[field]`` when there is one. A Setting in *custom* replaces the
    plain one of its path (other names, a metavar, an envvar...).

    Raises:
        ValueError: a Setting in *custom* names no field.
    """
    own = {setting.path: setting for setting in custom}

    def walk(owner: type[BaseModel], prefix: str, extra: dict[str, Any]) -> Iterator[Setting]:
        for name, info in owner.model_fields.items():
            path, inner = prefix + name, _strip_annotated(info.annotation)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                panel = {"rich_help_panel": panels[path]} if panels and path in panels else extra
                yield from walk(inner, f"{path}.", panel)
            else:
                yield own.pop(path, None) or Setting(path, extra=dict(extra))

    found = list(walk(model, "", {}))
    if own:
        raise ValueError(f"{model.__name__} has no field {', '.join(sorted(own))}")
    return found


def config_command(
    model: type[BaseModel], settings: Sequence[Setting], *, ranges: bool = False
) -> Callable[[Callable[..., M]], Any]:
    """Give a ``def command(**options)`` one typer option (or argument) per setting, from *model*.

    With ``ranges``, a number option also carries its field's bounds, so the command line refuses a
    value out of range as it parses (click's usage error) rather than when the model is built.
    """
    parameters = []
    for setting in settings:
        owner, name, default = _resolve(model, setting.path)
        info = owner.model_fields[name]
        help_text = setting.extra.get("help") or field_help(owner, name)
        extra = {k: v for k, v in setting.extra.items() if k != "help"}
        extra = {**_range(info), **extra} if ranges else extra
        if setting.argument:
            param = typer.Argument(default, help=help_text, **extra)
        else:
            param = typer.Option(default, *setting.decls, help=help_text, **extra)
        annotation = setting.annotation or _strip_annotated(info.annotation)
        parameters.append(inspect.Parameter(setting.name, _KEYWORD, default=param, annotation=annotation))

    def wrap(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def run(**options: Any) -> Any:
            return command(**options)

        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {}
        del run.__wrapped__  # typer must read the signature above, not the command's own
        return run

    return wrap


def _merged(value: BaseModel, updates: dict[str, Any]) -> BaseModel:
    """*value* with *updates* (nested dicts go into nested models), validated; set fields stay set."""
    data = {name: getattr(value, name) for name in value.model_fields_set}
    for name, update in updates.items():
        current = getattr(value, name)
        nested = isinstance(update, dict) and isinstance(current, BaseModel)
        data[name] = _merged(current, update) if nested else update
    return type(value).model_validate(data)


def build_config(model: type[M], options: dict[str, Any], settings: Sequence[Setting]) -> M:
    """*model* from a command's parsed *options*: ``None`` means the model's default.

    Raises:
        pydantic.ValidationError: a value is invalid (the message names the field).
    """
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for setting in settings:
        value = options.get(setting.name)
        if value is None:
            continue
        parent, _, name = setting.path.partition(".")
        if not name:
            top[parent] = value
            continue
        tree = nested.setdefault(parent, {})
        *middle, last = name.split(".")
        for part in middle:
            tree = tree.setdefault(part, {})
        tree[last] = value
    for parent, updates in nested.items():
        default = model.model_fields[parent].get_default(call_default_factory=True)
        top[parent] = _merged(default, updates)
    return model.model_validate(top)



@contextmanager
def exit_on(console: Console, *errors: type[Exception], code: int = 2) -> Iterator[None]:
    """Inside, an error of the kinds ``errors`` is printed in red (its text escaped, so a message
    holding ``[...]`` prints as written, not as rich markup) and the command exits with ``code``."""
    try:
        yield
    except errors as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(code=code) from exc
