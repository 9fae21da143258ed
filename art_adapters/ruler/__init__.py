"""RULER: an LLM judge scores a group's trajectories relative to each other.

* ``_prompt``: the judge's prompt (shared prefix once, identical trajectories once).
* ``_judges``: LangChain chat model or litellm string, behind one call.
* ``_answer``: parse and validate the answer (ids, range, duplicates).
* ``_cache``: answers on disk, keyed by a content hash.
* ``_config``: :class:`RulerConfig`, every setting of the scorer.
* ``_judge_env``: :func:`judge_from_env`, the judge named by the environment.
* ``_score``: :func:`ruler_score_group`, :func:`ruler_score_groups`, :func:`combine_rewards`.
"""

from ._answer import JudgeScore
from ._cache import RulerCache
from ._config import RulerConfig
from ._judge_env import judge_from_env
from ._judges import LangChainJudge, LiteLLMJudge
from ._prompt import DEFAULT_RUBRIC, JudgeRequest, build_request
from ._score import combine_rewards, ruler_score_group, ruler_score_groups

__all__ = [
    "DEFAULT_RUBRIC",
    "JudgeRequest",
    "JudgeScore",
    "LangChainJudge",
    "LiteLLMJudge",
    "RulerCache",
    "RulerConfig",
    "build_request",
    "combine_rewards",
    "judge_from_env",
    "ruler_score_group",
    "ruler_score_groups",
]
