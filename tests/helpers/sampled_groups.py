"""Test helper: a group of trajectories from one chat completion with ``n`` choices.

:func:`group_from_choices` builds it from a response; :func:`sampled_group` samples one too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from art_adapters import TrainableModel, Trajectory, TrajectoryGroup
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


async def sampled_group(
    model: TrainableModel,
    n: int,
    reward: Callable[[Any], float],
    *,
    prompt: str = "Name a colour.",
    max_tokens: int = 6,
    seed: int = 1,
) -> TrajectoryGroup:
    """``n`` completions of the user ``prompt`` by ``model``'s served step (temperature 1.0, ``seed``),
    as :func:`group_from_choices` with ``reward(choice)``."""
    client = model.openai_client()
    try:
        response = await client.chat.completions.create(
            model=model.served_name(), messages=[{"role": "user", "content": prompt}], n=n, temperature=1.0,
            max_tokens=max_tokens, seed=seed,
        )  # fmt: skip
    finally:
        await client.close()
    return group_from_choices([Message(role="user", content=prompt)], response, reward)
