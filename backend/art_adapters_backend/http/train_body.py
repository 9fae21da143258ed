"""Reading a train body (up to ``--max-train-request-bytes``) without stalling the event loop.

``json.loads`` and pydantic hold the GIL for a whole call: parsing 36 MB of groups in a worker
thread still froze ``/health`` for 3.5 s. :func:`read_train_body` (run in a worker thread) decodes
the body one trajectory at a time, refusing a group or trajectory count past the server's caps as
soon as it is passed, and validates group by group, so the loop gets the GIL between items.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

from pydantic import BaseModel

from art_adapters import Trajectory, TrajectoryGroup

from ..errors import BadRequestError
from ..limits import ServeLimits
from .json_body import JsonReader, json_errors, validated

__all__ = ["MAX_BODY_DEPTH", "read_train_body"]

#: The deepest nesting (objects and arrays) a train body may have; deeper values could not be
#: written back out (pydantic's serializer stops near 250 levels) and are refused with a 400.
MAX_BODY_DEPTH = 128

_M = TypeVar("_M", bound=BaseModel)


def _value(reader: JsonReader, depth: int) -> Any:
    """The next whole value, found ``depth`` levels down the body, within :data:`MAX_BODY_DEPTH`."""
    value = reader.value()
    _check_depth(value, depth)
    return value


def _check_depth(value: Any, depth: int) -> None:
    """A 400 when ``value``, found ``depth`` levels down the body, nests past :data:`MAX_BODY_DEPTH`."""
    stack = [(value, depth)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if level + 1 > MAX_BODY_DEPTH:
            raise BadRequestError(f"the body is nested more than {MAX_BODY_DEPTH} levels deep; flatten it",
                                  code="invalid_json")  # fmt: skip
        stack.extend((child, level + 1) for child in children)


def _array(reader: JsonReader, limit: int, param: str, flag: str, depth: int) -> list[Any]:
    """The array at the cursor, element by element; a 400 as soon as it passes ``limit`` elements."""
    if reader.peek() != "[":
        return _value(reader, depth)  # not an array: pydantic says so
    reader.pos += 1
    out: list[Any] = []
    for _ in reader.items("]"):
        if len(out) == limit:
            raise BadRequestError(f"{param} has more than {limit} entries; this server allows at most {limit} "
                                  f"(serve {flag})", param=param)  # fmt: skip
        out.append(_value(reader, depth + 1))
    return out


def _group(reader: JsonReader, limits: ServeLimits, param: str) -> Any:
    if reader.peek() != "{":
        return _value(reader, 2)
    reader.pos += 1
    group: dict[str, Any] = {}
    for _ in reader.items("}"):
        key = reader.key()
        if key == "trajectories":
            group[key] = _array(reader, limits.max_group_trajectories, f"{param}.trajectories",
                                "--max-group-trajectories", 3)  # fmt: skip
        else:
            group[key] = _value(reader, 3)
    return group


def _validated(model: type[_M], value: Any, loc: tuple[Any, ...]) -> _M | Any:
    """``value`` as ``model``, errors located under ``loc``; a non-object is left to the body's model."""
    return validated(model, value, loc) if isinstance(value, dict) else value


def read_train_body(raw: bytes, model: type[_M], limits: ServeLimits, sft: bool) -> _M:
    """``raw`` as ``model`` (``TrainRequest``, or ``SFTRequest`` with ``sft``), within ``limits``' counts.

    Raises:
        BadRequestError: not UTF-8 JSON, nested too deep, or more groups or trajectories than allowed.
        RequestValidationError: the body does not match ``model`` (the app's usual 400).
    """
    with json_errors():
        reader = JsonReader(raw.decode("utf-8"))
        body: dict[str, Any] = {}
        reader.expect("{")
        for _ in reader.items("}"):
            key = reader.key()
            if key == "groups" and not sft and reader.peek() == "[":
                body[key] = [_group(reader, limits, f"groups[{i}]") for i, _ in
                             enumerate(_array_cursor(reader, limits.max_train_groups))]  # fmt: skip
            elif key == "trajectories" and sft and reader.peek() == "[":
                body[key] = _array(reader, limits.max_group_trajectories, "trajectories",
                                   "--max-group-trajectories", 1)  # fmt: skip
            else:
                body[key] = _value(reader, 1)
        reader.end()
    if isinstance(body.get("groups"), list):  # one group at a time: the loop gets the GIL between them
        body["groups"] = [_validated(TrajectoryGroup, g, ("groups", i)) for i, g in enumerate(body["groups"])]
    if isinstance(body.get("trajectories"), list):
        body["trajectories"] = [_validated(Trajectory, t, ("trajectories", i))
                                for i, t in enumerate(body["trajectories"])]  # fmt: skip
    return validated(model, body)


def _array_cursor(reader: JsonReader, limit: int) -> Iterator[None]:
    """Yield once per element of the ``groups`` array at the cursor (the caller reads it); a 400 past ``limit``."""
    reader.expect("[")
    for count, _ in enumerate(reader.items("]")):
        if count == limit:
            raise BadRequestError(f"the request sends more than {limit} trajectory groups; this server allows "
                                  f"at most {limit} (serve --max-train-groups)", param="groups")  # fmt: skip
        yield
