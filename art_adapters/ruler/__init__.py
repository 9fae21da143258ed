"""RULER: an LLM judge scores a group's trajectories relative to each other (no reward function to write).

::

    scored = await ruler_score_group(group, judge=judge)
    groups = await ruler_score_groups(groups, judge=judge, config=RulerConfig(swallow_exceptions=True))

What a pass leaves (GroupJudgement, TrajectoryJudgement), ensembles, dimensions, monitors: docs/ruler.md.
"""

from ._answer import JudgeScore
from ._cache import RulerCache
from ._config import RulerConfig
from ._identity import judge_identity
from ._judgement import GroupJudgement, JudgeVerdict, TrajectoryJudgement
from ._judge_env import judge_from_env, judges_from_env
from ._judges import LangChainJudge, LiteLLMJudge
from ._monitor import JudgeChangeMonitor
from ._prompt import DEFAULT_RUBRIC, JudgeRequest, build_request
from ._score import combine_rewards, ruler_score_group, ruler_score_groups

__all__ = [
    "DEFAULT_RUBRIC",
    "GroupJudgement",
    "JudgeChangeMonitor",
    "JudgeRequest",
    "JudgeScore",
    "JudgeVerdict",
    "LangChainJudge",
    "LiteLLMJudge",
    "RulerCache",
    "RulerConfig",
    "TrajectoryJudgement",
    "build_request",
    "combine_rewards",
    "judge_from_env",
    "judge_identity",
    "judges_from_env",
    "ruler_score_group",
    "ruler_score_groups",
]
