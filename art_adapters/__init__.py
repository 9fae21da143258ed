"""art-adapters: train the open model behind a LangGraph + MCP agent with RL.

The public surface is re-exported here (see ``__all__``). Importing this package is
cheap: it never loads torch, transformers, vLLM, Unsloth or FastAPI (the backend is a
separate service, ``art_adapters_backend``), and modules that pull LangChain or
OpenTelemetry in are loaded on first use of their names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .backends import Backend, LocalBackend, RemoteBackend
from .errors import (
    ArtAdaptersError,
    BackendError,
    BackendRequestError,
    BackendUnavailableError,
    ConfigError,
    JudgeError,
    RolloutError,
    ToolServerError,
)
from .model import TrainableModel, TrainResult
from .train_config import RetentionPolicy, TrainConfig
from .trajectory import (
    History,
    Message,
    RolloutException,
    ToolCall,
    ToolCallRecord,
    ToolSchema,
    Trajectory,
    TrajectoryGroup,
    load_groups,
    save_groups,
)

if TYPE_CHECKING:
    from .capture.langchain import TrajectoryCallbackHandler
    from .capture.otel import TrajectorySpanProcessor
    from .loop import LoopConfig, LoopResult, combined_scorer, ruler_scorer, train_loop, verifiable_scorer
    from .observe import trajectories_from_langfuse, trajectories_from_otlp_json
    from .ruler import combine_rewards, ruler_score_group, ruler_score_groups
    from .runner import RolloutBudgetError, run_groups, run_groups_sync

__version__ = "0.1.0"

# Names whose modules are imported on first access (they pull in LangChain / OTel SDK).
_LAZY: dict[str, str] = {
    "TrajectoryCallbackHandler": ".capture.langchain",
    "TrajectorySpanProcessor": ".capture.otel",
    "RolloutBudgetError": ".runner",
    "LoopConfig": ".loop",
    "LoopResult": ".loop",
    "combined_scorer": ".loop",
    "ruler_scorer": ".loop",
    "train_loop": ".loop",
    "verifiable_scorer": ".loop",
    "run_groups": ".runner",
    "run_groups_sync": ".runner",
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
    "RolloutException",
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
