"""art-adapters: train the open model behind a LangGraph + MCP agent with RL.

The public surface is re-exported here (see ``__all__``). Importing this package is
cheap: it never loads torch, transformers, vLLM, Unsloth or FastAPI (the backend is a
separate service, ``art_adapters_backend``), and modules that pull LangChain or
OpenTelemetry in are loaded on first use of their names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._backends import Backend, LocalBackend, RemoteBackend
from ._errors import (
    ArtAdaptersError,
    BackendError,
    BackendRequestError,
    BackendUnavailableError,
    ConfigError,
    JudgeError,
    RolloutError,
    ToolServerError,
)
from ._model import TrainableModel, TrainResult
from ._capture.events import TOOL_RECORD_EVENT
from ._train_config import RetentionPolicy, TrainConfig
from ._trajectory import (
    History,
    Message,
    RolloutFailure,
    ToolCall,
    ToolCallRecord,
    ToolSchema,
    Trajectory,
    TrajectoryGroup,
    load_groups,
    save_groups,
)

if TYPE_CHECKING:
    from ._capture.langchain import TrajectoryCallbackHandler
    from ._capture.otel import TrajectorySpanProcessor
    from ._loop import LoopConfig, LoopResult, combined_scorer, ruler_scorer, train_loop, verifiable_scorer
    from .observe import trajectories_from_langfuse, trajectories_from_otlp_json
    from .ruler import combine_rewards, ruler_score_group, ruler_score_groups
    from ._runner import RolloutBudgetError, run_groups, run_groups_sync

__version__ = "0.1.0"

# Names whose modules are imported on first access (they pull in LangChain / OTel SDK).
_LAZY: dict[str, str] = {
    "TrajectoryCallbackHandler": "._capture.langchain",
    "TrajectorySpanProcessor": "._capture.otel",
    "RolloutBudgetError": "._runner",
    "LoopConfig": "._loop",
    "LoopResult": "._loop",
    "combined_scorer": "._loop",
    "ruler_scorer": "._loop",
    "train_loop": "._loop",
    "verifiable_scorer": "._loop",
    "run_groups": "._runner",
    "run_groups_sync": "._runner",
    "combine_rewards": ".ruler",
    "ruler_score_group": ".ruler",
    "ruler_score_groups": ".ruler",
    "trajectories_from_langfuse": ".observe",
    "trajectories_from_otlp_json": ".observe",
}

__all__ = [
    "ArtAdaptersError",
    "Backend",
    "BackendError",
    "BackendRequestError",
    "BackendUnavailableError",
    "ConfigError",
    "History",
    "JudgeError",
    "LocalBackend",
    "LoopConfig",
    "LoopResult",
    "Message",
    "RemoteBackend",
    "RetentionPolicy",
    "RolloutBudgetError",
    "RolloutError",
    "RolloutFailure",
    "TOOL_RECORD_EVENT",
    "ToolCall",
    "ToolCallRecord",
    "ToolSchema",
    "ToolServerError",
    "TrainConfig",
    "TrainResult",
    "TrainableModel",
    "Trajectory",
    "TrajectoryCallbackHandler",
    "TrajectoryGroup",
    "TrajectorySpanProcessor",
    "combine_rewards",
    "combined_scorer",
    "load_groups",
    "ruler_score_group",
    "ruler_score_groups",
    "ruler_scorer",
    "run_groups",
    "run_groups_sync",
    "save_groups",
    "train_loop",
    "trajectories_from_langfuse",
    "trajectories_from_otlp_json",
    "verifiable_scorer",
]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'art_adapters' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
