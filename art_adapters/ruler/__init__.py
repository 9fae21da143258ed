"""RULER: an LLM judge scores a group's trajectories relative to each other.

No reward function to write: the judge compares the rollouts of one scenario against a rubric.

::

    judge = ChatOpenAI(base_url="http://127.0.0.1:8000/v1", model="judge", api_key="-")
    scored = await ruler_score_group(group, judge=judge)
    groups = await ruler_score_groups(groups, judge=judge, config=RulerConfig(swallow_exceptions=True))

    # an ensemble, scores per rubric dimension, and a warning if the run's judge changes
    scored = await ruler_score_group(group, judges=[judge_a, judge_b], aggregate="rank_mean")
    scored = await ruler_score_group(group, judge=judge, dimensions={"correctness": 2, "efficiency": 1})
    groups = await ruler_score_groups(groups, judge=judge, monitor=JudgeChangeMonitor(run="run-1"))

See docs/ruler.md for the aggregation, agreement, dimensions, identity and cache rules.
"""

from ._answer import JudgeScore
from ._cache import RulerCache
from ._config import RulerConfig
from ._identity import judge_identity
from ._judge_env import judge_from_env, judges_from_env
from ._judges import LangChainJudge, LiteLLMJudge
from ._monitor import JudgeChangeMonitor
from ._prompt import DEFAULT_RUBRIC, JudgeRequest, build_request
from ._score import combine_rewards, ruler_score_group, ruler_score_groups

__all__ = [
    "DEFAULT_RUBRIC",
    "JudgeChangeMonitor",
    "JudgeRequest",
    "JudgeScore",
    "LangChainJudge",
    "LiteLLMJudge",
    "RulerCache",
    "RulerConfig",
    "build_request",
    "combine_rewards",
    "judge_from_env",
    "judge_identity",
    "judges_from_env",
    "ruler_score_group",
    "ruler_score_groups",
]
