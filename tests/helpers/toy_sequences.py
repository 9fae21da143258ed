"""Test helper: training sequences for the trainer tests.

:func:`completion_sequence` is one prompt + completion; :func:`toy_sequences` four real
conversations of the bundled model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from art_adapters_backend.training.data import TrainingSequence

#: (question, answer, advantage): short and long answers, advantages of both signs and unequal sizes.
TOY_CONVERSATIONS = [
    ("What is 2+2?", "4", 1.0),
    ("What is 3+5?", "The answer is eight, I think.", -0.6),
    ("Name a colour.", "Blue.", 0.9),
    ("Say hello in French.", "Bonjour! Comment allez-vous aujourd'hui?", -1.2),
]


def completion_sequence(
    prompt: list[int],
    completion: list[int],
    advantage: float,
    group_id: str,
    trajectory_id: str,
    **fields: Any,
) -> TrainingSequence:
    """``prompt`` (masked out) + ``completion`` (masked in), old log-probs unknown (``None``);
    ``fields``: the sequence's other fields (``temperature``...)."""
    return TrainingSequence(
        token_ids=prompt + completion,
        loss_mask=[0] * len(prompt) + [1] * len(completion),
        old_logprobs=[None] * (len(prompt) + len(completion)),
        advantage=advantage,
        group_id=group_id,
        trajectory_id=trajectory_id,
        **fields,
    )


def toy_sequences(tokenizer: Any, render: Any, group_of: Callable[[int], str]) -> list[TrainingSequence]:
    """:data:`TOY_CONVERSATIONS` as sequences: the rendered prompt (masked out) + the answer (masked in).

    Old log-probs are unknown (``None``); trajectory ``i`` is ``t{i}`` in group ``group_of(i)``.
    """
    out = []
    for i, (question, answer, advantage) in enumerate(TOY_CONVERSATIONS):
        prompt = render([{"role": "user", "content": question}], None, add_generation_prompt=True)
        completion = tokenizer.encode(answer, add_special_tokens=False)
        out.append(completion_sequence(prompt, completion, advantage, group_of(i), f"t{i}"))
    return out
