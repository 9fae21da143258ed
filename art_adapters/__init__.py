"""art-adapters: train the open model behind a LangGraph + MCP agent with RL.

The public surface is re-exported here (see ``__all__``). Importing this package is
cheap: it never loads torch, transformers, vLLM, Unsloth or FastAPI (the backend is a
separate service, ``art_adapters_backend``), and modules that pull LangChain or
OpenTelemetry in are loaded on first use of their names.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._adapter_config import RetentionPolicy
from ._backends import Backend, LocalBackend, RemoteBackend
from ._capture.events import TOOL_RECORD_EVENT
from ._errors import (
    ArtAdaptersError,
    BackendError,
    BackendRequestError,
    BackendUnavailableError,
    ConfigError,
    JudgeError,
    RolloutBudgetError,
    RolloutError,
    ToolServerError,
)
from ._lazy import lazy_exports as _lazy_exports
from ._model import CheckpointInfo, TrainableModel, TrainResult
from ._sft_config import SFTConfig, load_trajectories
from ._train_config import TrainConfig
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

if _TYPE_CHECKING:
    from ._capture.langchain import TrajectoryCallbackHandler
    from ._capture.otel import TrajectorySpanProcessor
    from ._capture.otel_genai import mcp_tool_record
    from ._loop import EvalReport, LoopConfig, LoopResult, StepReport, train_loop
    from ._paired import PairedComparison
    from ._runner import RolloutFn, RunConfig, RunProgress, run_groups, run_groups_sync
    from ._scorers import Scorer, combined_scorer, ruler_scorer, verifiable_scorer
    from ._tool_reward import tool_use_reward
    from .observe import trajectories_from_langfuse, trajectories_from_otlp_json
    from .ruler import (
        GroupJudgement,
        JudgeVerdict,
        RulerConfig,
        TrajectoryJudgement,
        combine_rewards,
        ruler_score_group,
        ruler_score_groups,
    )

__version__ = "0.1.0"

__all__ = [
    "Agreement",
    "ArtAdaptersError",
    "Backend",
    "BackendError",
    "BackendRequestError",
    "BackendUnavailableError",
    "Calibration",
    "CheckpointInfo",
    "ConfigError",
    "EvalReport",
    "GroupJudgement",
    "HackingMonitor",
    "HackingMonitorConfig",
    "HackingWarning",
    "History",
    "JudgeError",
    "JudgeVerdict",
    "LocalBackend",
    "LoopConfig",
    "LoopResult",
    "Message",
    "PairedComparison",
    "RemoteBackend",
    "RetentionPolicy",
    "RolloutBudgetError",
    "RolloutError",
    "RolloutFailure",
    "RolloutFn",
    "RulerConfig",
    "RunConfig",
    "RunProgress",
    "SFTConfig",
    "Scorer",
    "StepReport",
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
    "TrajectoryJudgement",
    "TrajectorySpanProcessor",
    "__version__",
    "calibrate",
    "combine_rewards",
    "combined_scorer",
    "load_groups",
    "load_trajectories",
    "mcp_tool_record",
    "ruler_score_group",
    "ruler_score_groups",
    "ruler_scorer",
    "run_groups",
    "run_groups_sync",
    "save_groups",
    "tool_use_reward",
    "train_loop",
    "trajectories_from_langfuse",
    "trajectories_from_otlp_json",
    "verifiable_scorer",
]

# Names whose modules are imported on first access (they pull in LangChain / OTel SDK).
__getattr__, __dir__ = _lazy_exports(
    __name__,
    {
        "._capture.langchain": "TrajectoryCallbackHandler",
        "._capture.otel": "TrajectorySpanProcessor",
        "._capture.otel_genai": "mcp_tool_record",
        "._calibration": "Agreement Calibration calibrate",
        "._hacking": "HackingMonitor HackingMonitorConfig HackingWarning",
        "._loop": "EvalReport LoopConfig LoopResult StepReport train_loop",
        "._paired": "PairedComparison",
        "._scorers": "Scorer combined_scorer ruler_scorer verifiable_scorer",
        "._tool_reward": "tool_use_reward",
        "._runner": "RolloutFn RunConfig RunProgress run_groups run_groups_sync",
        ".ruler": "GroupJudgement JudgeVerdict RulerConfig TrajectoryJudgement combine_rewards "
        "ruler_score_group ruler_score_groups",
        ".observe": "trajectories_from_langfuse trajectories_from_otlp_json",
    },
)
