"""Reading a JSON request body a value at a time, in a worker thread, so the event loop keeps the GIL.

``json.loads`` and pydantic hold the GIL for a whole call, wherever it runs: a 1.6 MB body of
30,000 one-line tools takes 25-50 ms to parse on a 2-core machine, and ``/health`` waited behind it.
:class:`JsonReader` decodes a body's large arrays one element at a time (``raw_decode``), so the
loop takes the GIL between elements; :func:`read_json_body` does so for the chat and Responses
routes, and :mod:`.train_body` for the training routes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from ..errors import BadRequestError

__all__ = ["ArrayRule", "JsonReader", "body_schema", "json_errors", "read_json_body", "validated"]

_M = TypeVar("_M", bound=BaseModel)
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()

#: How a top-level array of a body is read: at most how many elements are kept, and the error for a
#: longer one given a lower bound of its length (``None``: no bound, every element kept).
ArrayRule = tuple[int, Callable[[int], BadRequestError]] | None


class JsonReader:
    """A cursor over a body's text that decodes one JSON value at a time.

    Args:
        text: the whole body, decoded from UTF-8.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        """The next character after white space ('' at the end), not consumed."""
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]
        return self.text[self.pos : self.pos + 1]

    def expect(self, char: str) -> None:
        """Consume ``char`` (after white space), else a ``JSONDecodeError``."""
        if self.peek() != char:
            raise json.JSONDecodeError(f"Expecting {char!r}", self.text, self.pos)
        self.pos += 1

    def value(self) -> Any:
        """Decode the next whole JSON value."""
        self.peek()
        value, self.pos = _DECODER.raw_decode(self.text, self.pos)
        return value

    def key(self) -> str:
        """Decode the next member's name and its colon."""
        start = self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]
        name = self.value() if self.text[start : start + 1] == '"' else None
        if not isinstance(name, str):
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", self.text, start)
        self.expect(":")
        return name

    def items(self, close: str) -> Iterator[None]:
        """Yield once per element of the array or object just opened, up to ``close``."""
        if self.peek() == close:
            self.pos += 1
            return
        while True:
            yield
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect(close)
            return

    def end(self) -> None:
        """A ``JSONDecodeError`` unless only white space is left."""
        if self.peek():
            raise json.JSONDecodeError("Extra data", self.text, self.pos)


@contextmanager
def json_errors() -> Iterator[None]:
    """Turn a body that is not UTF-8 JSON into the server's 400 (``code: invalid_json``)."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise BadRequestError(f"invalid JSON body: not UTF-8 ({exc.reason} at byte {exc.start})",
                              code="invalid_json") from None  # fmt: skip
    except (json.JSONDecodeError, RecursionError) as exc:
        where = f" (at character {exc.pos})" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
        raise BadRequestError(f"invalid JSON body: {reason}{where}; send a JSON object",
                              code="invalid_json") from None  # fmt: skip


def body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route that reads ``model`` from its body itself."""
    schema = model.model_json_schema()
    schema["$id"] = f"urn:art-adapters:{model.__name__}"  # its '#/$defs/...' refs resolve within it
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def validated(model: type[_M], value: Any, loc: tuple[Any, ...] = ("body",)) -> _M:
    """``value`` (found at ``loc`` in the body) as ``model``; a mismatch is the app's usual 400 (a
    ``RequestValidationError``, its errors located under ``loc``)."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**error, "loc": (*loc, *error["loc"])} for error in exc.errors(include_url=False)]
        ) from None


def _array(reader: JsonReader, rule: ArrayRule) -> Any:
    """The array at the cursor, element by element; the element past the rule's bound ends the read.

    Nothing after it is decoded: counting 30,000 one-line tools past a bound of 128 decoded them all
    in the worker thread (~150 ms of Python per request) and, taking the GIL turn about with the event
    loop, was what held ``/health`` up to 18 ms in the soak (2.7 ms idle).
    """
    if reader.peek() != "[":
        return reader.value()  # not an array: the model says so
    reader.pos += 1
    kept: list[Any] = []
    for _ in reader.items("]"):
        if rule is not None and len(kept) == rule[0]:
            raise rule[1](len(kept) + 1)  # at least
        kept.append(reader.value())
    return kept


def read_json_body(raw: bytes, model: type[_M], arrays: Mapping[str, ArrayRule]) -> _M:
    """``raw`` as ``model``, its top-level ``arrays`` decoded element by element (run it in a worker thread).

    An array longer than its rule's bound is refused with the rule's error as soon as an element past
    the bound begins (nothing after it decoded, nothing validated). A body that does not
    start as an object is refused as one, without decoding it.

    Raises:
        BadRequestError: not UTF-8 JSON, or an array past its bound.
        RequestValidationError: the body does not match ``model`` (the app's usual 400).
    """
    with json_errors():
        reader = JsonReader(raw.decode("utf-8"))
        if reader.peek() != "{":
            raise RequestValidationError([{"type": "model_attributes_type", "loc": ("body",), "input": None,
                                           "msg": "Input should be a JSON object"}])  # fmt: skip
        reader.pos += 1
        body: dict[str, Any] = {}
        for _ in reader.items("}"):
            key = reader.key()
            body[key] = _array(reader, arrays[key]) if key in arrays else reader.value()
        reader.end()
    return validated(model, body)
