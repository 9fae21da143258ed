"""``SFTConfig``: the settings of one supervised fine-tuning (SFT) step, and the trajectories file it reads.

Like :mod:`._train_config` this module imports pydantic only: the client builds an :class:`SFTConfig`,
sends ``config.model_dump(mode="json")`` with ``model.train_sft(...)`` and the backend validates the same
class again. :func:`load_trajectories` reads the JSON Lines file ``art-adapters import`` writes (one
``Trajectory`` a line), what ``art-adapters sft FILE.jsonl`` and ``LoopConfig.sft_warmup`` train from.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import (
    ConfigDict,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from ._adapter_config import SFT_LEARNING_RATE, AdapterConfig
from ._errors import ConfigError
from ._trajectory import Trajectory, TrajectoryGroup

__all__ = ["SFTConfig", "load_trajectories"]


class SFTConfig(AdapterConfig):
    """Settings of one SFT step: next-token cross-entropy on the trajectories' assistant turns.

    One ``model.train_sft(trajectories, config)`` call is one step: it makes ``epochs`` passes over
    the trajectories' sequences, one optimizer update per ``batch_size`` sequences, and writes the
    next checkpoint (``name@step``) like a GRPO step does. Every field is documented once: here, or
    (the LoRA shape and the settings every objective shares) in :class:`AdapterConfig`.

    Attributes:
        learning_rate: AdamW step size for the LoRA weights. Unitless, > 0. Default ``2e-4``
            (a common LoRA SFT rate; TRL's ``SFTTrainer`` default of ``2e-5`` is for full
            fine-tuning). Constant within the step.
        epochs: passes over the step's sequences (TRL's ``num_train_epochs``). Default ``1``.
        batch_size: sequences per optimizer update (the last update of a pass may have fewer).
            The loss of an update is the mean over its loss tokens (TRL's default for SFT).
            Default ``8``.
        only_model: train only the assistant turns of this model (a registered model's ``name``,
            which matches its turns of every step; ``name@step``, that checkpoint's turns only; or
            the ``model`` recorded on imported turns, e.g. a teacher's ``"gpt-4o"``); the others
            stay in the sequence as prompt. ``None`` (default) trains
            every assistant turn not marked ``generated=False``: the file is the demonstrations.

    The SFT step has an AdamW optimizer of its own, new for every step: SFT's gradients are
    large next to GRPO's, and Adam's moments would scale down the first GRPO updates after
    it for hundreds of steps. The GRPO optimizer state of the checkpoint it starts from is
    carried unchanged into the checkpoint it writes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    learning_rate: PositiveFloat = SFT_LEARNING_RATE
    epochs: PositiveInt = 1
    batch_size: PositiveInt = 8
    only_model: str | None = None

    @model_validator(mode="after")
    def _check(self) -> SFTConfig:
        if self.only_model is not None and not self.only_model.strip():
            raise ValueError("only_model must name a model (or be None for every assistant turn); got ''")
        return self


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read a trajectories file: JSON Lines, one ``Trajectory`` a line (what ``art-adapters import`` writes).

    A line holding a ``TrajectoryGroup`` (what :func:`~art_adapters.save_groups` and a loop's
    ``batches/`` write: a stronger model's rollouts) gives its trajectories. Blank lines are skipped.

    Raises:
        ConfigError: the file is missing or unreadable, holds no trajectory, or a line is not a
            trajectory (the message names the file and line number, and what is wrong).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"no trajectories file at {path}: write one with `art-adapters import SOURCE {path}`"
        )
    trajectories: list[Trajectory] = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(
                        f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno})"
                    ) from None
                if not isinstance(data, dict):
                    raise ConfigError(
                        f"{path}:{number}: a line must be one Trajectory object, got {type(data).__name__}"
                    )
                try:
                    if "trajectories" in data and "messages" not in data:
                        trajectories.extend(TrajectoryGroup.model_validate(data).trajectories)
                    else:
                        trajectories.append(Trajectory.model_validate(data))
                except ValidationError as exc:
                    first = exc.errors()[0]
                    where = ".".join(str(p) for p in first["loc"]) or "the line"
                    raise ConfigError(
                        f"{path}:{number}: not a Trajectory: {where}: {first['msg']} "
                        f"({exc.error_count()} error(s))"
                    ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not trajectories:
        raise ConfigError(f"{path} holds no trajectory (an empty file): nothing to train on")
    return trajectories
