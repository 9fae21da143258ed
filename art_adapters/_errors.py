"""The one exception hierarchy of art-adapters, split by where the failure happened.

::

    ArtAdaptersError
    ├── ConfigError            a setting or argument is wrong; fix the call
    ├── RolloutError           the user's rollout (graph run, tool call) failed
    │   ├── ToolServerError    an MCP server crashed, hung or refused a call
    │   └── RolloutBudgetError too many rollouts failed (run_groups' exception budget)
    ├── JudgeError             the RULER judge could not produce valid scores
    └── BackendError           the backend service failed or refused a request
        ├── BackendUnavailableError   it could not be reached / did not start
        └── BackendRequestError       it answered with an error (status + message)

Every message says what happened and what to do about it.
"""

from __future__ import annotations

__all__ = [
    "ArtAdaptersError",
    "BackendError",
    "BackendRequestError",
    "BackendUnavailableError",
    "ConfigError",
    "JudgeError",
    "RolloutError",
    "ToolServerError",
]


class ArtAdaptersError(Exception):
    """Base class of every error raised by art-adapters."""


class ConfigError(ArtAdaptersError, ValueError):
    """A setting or argument is invalid; the message names what to change."""


class RolloutError(ArtAdaptersError):
    """A rollout (one run of the user's agent) failed."""


class ToolServerError(RolloutError):
    """An MCP tool server crashed, hung past its timeout, or could not be started."""


class JudgeError(ArtAdaptersError):
    """The RULER judge did not return valid scores after its retries."""


class BackendError(ArtAdaptersError):
    """The training/inference backend failed."""


class BackendUnavailableError(BackendError):
    """The backend could not be reached, or the local backend did not start."""


class BackendRequestError(BackendError):
    """The backend answered a request with an error.

    Attributes:
        status_code: the HTTP status the backend returned.
        error_type: the OpenAI-style ``error.type`` field, when present.
    """

    def __init__(self, message: str, *, status_code: int, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type
