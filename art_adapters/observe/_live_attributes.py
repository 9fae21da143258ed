"""The attributes a live rollout span starts with and gains once scored (``observe._live``).

What Langfuse and any OTLP backend read to file, filter and score a rollout while it runs: the
RL context (scenario, group, step, policy version, split), Langfuse's trace name, tags, session
and metadata, then the reward, RULER's score and the judge's explanation.
"""

from __future__ import annotations

from art_adapters._trajectory import Trajectory
from art_adapters.observe._scores import ATTRIBUTE_PREFIX
from art_adapters.observe._spans import AttributeValue, RolloutContext
from art_adapters.ruler import TrajectoryJudgement

__all__ = ["rollout_attributes", "score_attributes"]


def rollout_attributes(context: RolloutContext, rollout_index: int) -> dict[str, AttributeValue]:
    """The RL attributes a live rollout span starts with (see ``docs/observability.md``).

    ``art_adapters.scenario.id``, ``.group.id``, ``.rollout.index``, ``.step``,
    ``.policy.version`` (``name@step``) and ``.split``; the GenAI ``gen_ai.operation.name =
    invoke_agent`` / ``gen_ai.request.model``; and what Langfuse reads to file the trace:
    its name, tags (``split:``, ``scenario:``, ``group:``, ``step:``), session (the group id) and
    metadata, so rollouts are filterable by group and step.
    """
    tags = [f"split:{context.split}"]
    attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": context.agent_name,
        "langfuse.observation.type": "agent",
        "langfuse.trace.name": f"rollout {context.scenario_id}" if context.scenario_id else "rollout",
        f"{ATTRIBUTE_PREFIX}.rollout.index": rollout_index,
        f"{ATTRIBUTE_PREFIX}.split": context.split,
        "langfuse.trace.metadata.rollout_index": rollout_index,
        "langfuse.trace.metadata.split": context.split,
    }
    if context.scenario_id is not None:
        tags.append(f"scenario:{context.scenario_id}")
        attrs[f"{ATTRIBUTE_PREFIX}.scenario.id"] = context.scenario_id
        attrs["langfuse.trace.metadata.scenario_id"] = context.scenario_id
    if context.group_id is not None:
        tags.append(f"group:{context.group_id}")
        attrs[f"{ATTRIBUTE_PREFIX}.group.id"] = context.group_id
        attrs["session.id"] = context.group_id
        attrs["langfuse.session.id"] = context.group_id
        attrs["langfuse.trace.metadata.group_id"] = context.group_id
    if context.step is not None:
        tags.append(f"step:{context.step}")
        attrs[f"{ATTRIBUTE_PREFIX}.step"] = context.step
        attrs["langfuse.trace.metadata.step"] = context.step
    if context.model is not None:
        attrs[f"{ATTRIBUTE_PREFIX}.policy.version"] = context.model
        attrs[f"{ATTRIBUTE_PREFIX}.model"] = context.model
        attrs["gen_ai.request.model"] = context.model
        attrs["langfuse.trace.metadata.policy_version"] = context.model
    if context.namespace:
        attrs[f"{ATTRIBUTE_PREFIX}.run"] = context.namespace
    attrs["langfuse.trace.tags"] = [*tags, *context.extra_tags]
    return attrs


def score_attributes(trajectory: Trajectory) -> dict[str, AttributeValue]:
    """The scores' attributes for the rollout span once scored: ``art_adapters.reward``, the RULER
    score and the judge's explanation (``art_adapters.judge.explanation``, also the GenAI
    ``gen_ai.evaluation.explanation``); from the pipelined loop ``art_adapters.policy_version``,
    ``.staleness`` and ``.pipeline`` (``trained`` / ``dropped_stale`` / ``skipped``); Langfuse trace
    metadata too, so traces filter by reward and staleness."""
    attrs: dict[str, AttributeValue] = {}
    if trajectory.reward is not None:
        attrs[f"{ATTRIBUTE_PREFIX}.reward"] = float(trajectory.reward)
        attrs["langfuse.trace.metadata.reward"] = float(trajectory.reward)
    judged = TrajectoryJudgement.read(trajectory)
    if judged is not None:
        attrs[f"{ATTRIBUTE_PREFIX}.ruler.score"] = judged.score
        if judged.explanation:
            attrs[f"{ATTRIBUTE_PREFIX}.judge.explanation"] = judged.explanation
            attrs["gen_ai.evaluation.explanation"] = judged.explanation
    # The pipelined loop's verdict on the rollout (LoopConfig.max_staleness): the checkpoint it
    # sampled from, how many steps behind it was when trained or dropped, and which of the two.
    for key in ("policy_version", "staleness", "pipeline"):
        value = trajectory.metadata.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            attrs[f"{ATTRIBUTE_PREFIX}.{key}"] = value
            attrs[f"langfuse.trace.metadata.{key}"] = value
    return attrs
