"""The backend's errors, each with the HTTP status and OpenAI-style body it is answered with.

Every error the server returns has the body OpenAI uses, so OpenAI clients raise their usual exceptions::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "...", "code": "..."}}

No web framework here: the wings raise these, and :mod:`.http.error_handlers` answers them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "APIError",
    "AuthenticationError",
    "BadRequestError",
    "CheckpointUnavailableError",
    "ConflictError",
    "EngineUnavailableError",
    "NotFoundError",
    "PermissionDeniedError",
    "ServerBusyError",
    "StorageUnavailableError",
    "error_body",
    "shown",
    "validation_message",
]

#: Roles used as discriminator tags of the message union; they are dropped from error paths.
_UNION_TAGS = frozenset({"system", "developer", "user", "assistant", "tool"})


class APIError(Exception):
    """An error answered with its class's ``status_code`` and an OpenAI-style body.

    The tree::

        APIError                    an error with an HTTP status (raise it anywhere in a request)
        ├── BadRequestError         400: the request is malformed or asks for the impossible
        │   ├── ContextLengthError  400: the prompt and max_tokens do not fit (serving.engine.base)
        │   ├── ConstraintError     400: a JSON schema cannot be compiled (serving.engine.constraint)
        │   └── ExportError         400: a checkpoint cannot be exported (serving.export)
        │       ├── ExportNotFoundError  404: no such run directory, model or step
        │       └── ExportExistsError    409: the output folder exists and is not empty
        ├── AuthenticationError     401: missing or wrong API key
        ├── PermissionDeniedError   403: a Host/Origin a server without a key does not answer
        ├── NotFoundError           404: unknown model, completion id or route
        ├── ConflictError           409: the request contradicts existing state
        ├── BodyTooLargeError       413: a body past the size limit (http.body_limit; an HTTPException)
        ├── ServerBusyError         429: at a concurrency or queue limit; retry after ``Retry-After`` s
        ├── CheckpointUnavailableError  500: a registered checkpoint's folder cannot be loaded
        ├── EngineUnavailableError  503: the inference engine cannot serve (e.g. it did not wake up)
        └── StorageUnavailableError 503: the run directory refused a write (disk full); nothing kept

    A subclass sets ``status_code``, ``error_type`` and, where it has one, a default ``code``
    (class attributes), most simply as class keywords: ``class X(APIError, status=401,
    kind="authentication_error", code=...)``. The app's one handler
    (:func:`.http.error_handlers.error_response`) answers every subclass from them.

    Args:
        message: what is wrong and, where it helps, what to do instead.
        param: the request field at fault (``"messages[1].content"``), if any.
        code: a short machine-readable code (``"model_not_found"``), instead of the class's.
    """

    status_code: int = 400
    error_type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None

    def __init_subclass__(
        cls, *, status: int | None = None, kind: str | None = None, code: str | None = None, **kwargs: Any
    ) -> None:
        """Set the subclass's ``status_code``, ``error_type`` and ``code`` from the class keywords given."""
        super().__init_subclass__(**kwargs)
        given = {"status_code": status, "error_type": kind, "code": code}
        for name, value in given.items():
            if value is not None:
                setattr(cls, name, value)

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        Exception.__init__(self, message)  # not super(): a subclass may also be an HTTPException
        self.message = message
        if param is not None:
            self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body of this error."""
        return error_body(self.message, self.error_type, self.param, self.code)

    def response_headers(self) -> dict[str, str]:
        """Headers the response carries (none but for a subclass's own)."""
        return {}


class BadRequestError(APIError, status=400):
    """400: the request is malformed or asks for something impossible."""


class AuthenticationError(APIError, status=401, kind="authentication_error"):
    """401: the API key is missing or wrong."""


class PermissionDeniedError(APIError, status=403, kind="permission_error"):
    """403: the request may not be answered (a server without an API key refuses foreign Host/Origin headers)."""


class NotFoundError(APIError, status=404):
    """404: the model, completion id or route does not exist."""


class ConflictError(APIError, status=409):
    """409: the request contradicts what already exists (e.g. a name taken by another base model)."""


class ServerBusyError(APIError, status=429, kind="rate_limit_error", code="server_busy"):
    """429: the server has as much work in progress as it takes on; the same request may be sent
    again after ``retry_after`` seconds (the ``Retry-After`` header, which OpenAI clients honour)."""

    def __init__(self, message: str, *, retry_after: int = 1, param: str | None = None,
                 code: str | None = None) -> None:  # fmt: skip
        super().__init__(message, param=param, code=code)
        self.retry_after = retry_after

    def response_headers(self) -> dict[str, str]:
        """The ``Retry-After`` header."""
        return {"Retry-After": str(self.retry_after)}


class CheckpointUnavailableError(APIError, status=500, kind="server_error"):
    """500: a registered checkpoint cannot be loaded (its folder is gone or unreadable); the server keeps serving."""


class EngineUnavailableError(APIError, status=503, kind="server_error"):
    """503: the inference engine cannot serve now (it failed to wake up after a training step)."""


class StorageUnavailableError(APIError, status=503, kind="server_error", code="storage_unavailable"):
    """503: a write to the run directory failed (disk full, I/O error); the change was not made.

    Nothing the failed request did is acknowledged or kept; the same request succeeds once
    the disk has room again.
    """


def shown(text: str, limit: int = 80) -> str:
    """``repr(text)``, cut to its first ``limit`` characters: an error message never echoes a whole
    client-sent string (a 3 MB model name would come back in the 404)."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The OpenAI error body ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _format_loc(loc: Sequence[Any]) -> str:
    parts: list[str] = []
    previous: Any = None
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif isinstance(item, str) and isinstance(previous, int) and item in _UNION_TAGS:
            pass  # the tagged-union member ('messages[0].user.content' -> 'messages[0].content')
        else:
            parts.append(f".{item}" if parts else str(item))
        previous = item
    return "".join(parts)


def validation_message(errors: Sequence[Mapping[str, Any]]) -> tuple[str, str | None]:
    """Turn pydantic/FastAPI validation errors into one readable message and the first bad param.

    Invalid JSON becomes ``"invalid JSON body: <reason> (at character N)"``; field errors become
    ``"invalid request: <field>: <problem>; <field>: <problem>"``.
    """
    if not errors:
        return "invalid request", None
    for error in errors:
        if error.get("type") == "json_invalid":
            reason = (error.get("ctx") or {}).get("error") or error.get("msg", "")
            loc = error.get("loc") or ()
            where = f" (at character {loc[-1]})" if loc and isinstance(loc[-1], int) else ""
            return f"invalid JSON body: {reason}{where}; send a JSON object", None
    problems: list[str] = []
    first_param: str | None = None
    for error in errors:
        loc = [item for item in error.get("loc", ()) if item != "body"]
        param = _format_loc(loc)
        if first_param is None and param:
            first_param = param
        msg = str(error.get("msg", "invalid value"))
        msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if error.get("type") == "missing":
            msg = "field required"
        elif error.get("type") == "extra_forbidden":
            msg = "unsupported field: this server does not implement it; remove it from the request"
        elif error.get("type") == "model_attributes_type" and not loc:
            msg = "the body must be a JSON object"
        problem = f"{param}: {msg}" if param else msg
        if problem not in problems:
            problems.append(problem)
    if len(problems) > 5:
        problems = [*problems[:5], f"and {len(problems) - 5} more"]
    return "invalid request: " + "; ".join(problems), first_param
