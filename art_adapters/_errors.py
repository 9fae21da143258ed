"""The one exception hierarchy of art-adapters, split by where the failure happened.

The tree is drawn in :class:`ArtAdaptersError`'s docstring. The mcp_tools errors are defined
(and exported) there, on these bases. Every message says what happened and what to do about it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._trajectory import RolloutFailure

__all__ = [
    "ArtAdaptersError",
    "BackendError",
    "BackendRequestError",
    "BackendUnavailableError",
    "ConfigError",
    "JudgeError",
    "RolloutBudgetError",
    "RolloutError",
    "ToolServerError",
]


class ArtAdaptersError(Exception):
    """Base class of every error raised by art-adapters.

    ::

        ArtAdaptersError
        ├── ConfigError                 a setting or argument is wrong; fix the call
        │   ├── ScenarioFileError       (mcp_tools) a scenarios file is missing or holds an invalid line
        │   └── CassetteError           (mcp_tools) a cassette file is missing or holds an invalid line
        │       └── CassetteMissError   (mcp_tools) a replayed call is not in the cassette (on_missing="fail")
        ├── RolloutError                the user's rollout (graph run, tool call) failed
        │   ├── ToolServerError         an MCP server crashed, hung or refused a call
        │   └── RolloutBudgetError      more rollouts failed than RunConfig's max_failures /
        │                               max_failure_rate allow
        ├── JudgeError                  the RULER judge could not produce valid scores
        ├── ScenarioGenerationError     (mcp_tools) the generator wrote too few valid scenarios
        └── BackendError                the backend service failed or refused a request
            ├── BackendUnavailableError it could not be reached / did not start
            └── BackendRequestError     it answered with an error (status + message)
    """


class ConfigError(ArtAdaptersError, ValueError):
    """A setting or argument is invalid; the message names what to change."""


class RolloutError(ArtAdaptersError):
    """A rollout (one run of the user's agent) failed."""


class ToolServerError(RolloutError):
    """An MCP tool server crashed, hung past its timeout, or could not be started."""


class RolloutBudgetError(RolloutError):
    """More rollouts failed than the run's budget allows; the remaining ones were cancelled.

    The budget is the stricter of :class:`~art_adapters.RunConfig`'s ``max_failures`` (a count)
    and ``max_failure_rate`` (a fraction of all rollouts); the message names the one exceeded.

    Attributes:
        exceptions: every failure recorded before the run stopped, oldest first.
        budget: the number of failures the run tolerated.
        total: the number of rollouts the run was asked for.
        setting: the setting that was exceeded (``"max_failures"`` or ``"max_failure_rate"``).
    """

    def __init__(
        self,
        message: str,
        *,
        exceptions: list[RolloutFailure],
        budget: int,
        total: int,
        setting: str = "max_failures",
    ) -> None:
        super().__init__(message)
        self.exceptions = exceptions
        self.budget = budget
        self.total = total
        self.setting = setting


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
