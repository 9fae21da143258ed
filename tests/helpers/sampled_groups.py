"""Test helper: a group of trajectories from one chat completion with ``n`` choices."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from art_adapters import Trajectory, TrajectoryGroup
from art_adapters._trajectory import Message


def group_from_choices(
    prompt: Sequence[Message],
    response: Any,
    reward: Callable[[Any], float],
    metadata: dict[str, Any] | None = None,
) -> TrajectoryGroup:
    """One trajectory per choice of ``response`` (an openai ChatCompletion): ``prompt`` plus the
    choice as an assistant turn linked to its token record, rewarded by ``reward(choice)``."""
    return TrajectoryGroup(
        trajectories=[
            Trajectory(
                messages=[
                    *prompt,
                    Message(
                        role="assistant",
                        content=choice.message.content,
                        completion_id=response.id,
                        choice_index=choice.index,
                    ),
                ],
                reward=reward(choice),
            )
            for choice in response.choices
        ],
        metadata=metadata or {},
    )
