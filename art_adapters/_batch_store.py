"""``BatchStore``: the training loop's rollouts on disk, so a crash before the train step loses none.

Rollouts are the expensive part of a step (a real agent may take minutes per scenario), and
scoring can fail (a judge endpoint down): :func:`~art_adapters.train_loop` saves each batch's groups
here (``run_dir/batches/``) before and after scoring, and a restarted loop reuses them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ._trajectory import TrajectoryGroup, load_groups, save_groups

__all__ = ["BatchStore", "StoredBatch"]

logger = logging.getLogger(__name__)

#: Group metadata key holding the model step the rollouts were sampled at.
STEP_KEY = "loop_step"


@dataclass
class StoredBatch:
    """A batch found on disk: its groups and whether they carry rewards already."""

    groups: list[TrajectoryGroup]
    scored: bool


class BatchStore:
    """The ``batches/`` folder of one training run.

    The loop writes each batch's groups as soon as they exist, and again once scored::

        batch-000004.rollouts.jsonl   the groups as run_groups returned them
        batch-000004.scored.jsonl     the same groups with rewards

    A restarted loop that comes to the same batch at the same model step reuses them (see
    :meth:`load`): scored groups go straight to training, unscored ones are scored first.

    Args:
        run_dir: the loop's run directory.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.folder = Path(run_dir) / "batches"

    def path(self, batch: int, *, scored: bool) -> Path:
        """The file of ``batch``'s groups, before or after scoring."""
        return self.folder / f"batch-{batch:06d}.{'scored' if scored else 'rollouts'}.jsonl"

    def save(self, batch: int, step: int, groups: list[TrajectoryGroup], *, scored: bool) -> Path:
        """Write ``batch``'s groups (sampled at model ``step``) atomically; returns the file."""
        for group in groups:
            group.metadata[STEP_KEY] = step
        return save_groups(self.path(batch, scored=scored), groups)

    def load(self, batch: int, step: int, scenario_ids: list[str]) -> StoredBatch | None:
        """``batch``'s groups if they were sampled at ``step`` for exactly ``scenario_ids``, else ``None``.

        The scored file is preferred; a file that cannot be read is logged and ignored. Groups made
        at another step (the policy has changed since) or for other scenarios are not reused.
        """
        for scored in (True, False):
            path = self.path(batch, scored=scored)
            if not path.is_file():
                continue
            try:
                groups = load_groups(path)
            except (OSError, ValueError) as exc:
                logger.warning("ignoring %s: %s", path, exc)
                continue
            ids = [str(g.metadata.get("scenario_id")) for g in groups]
            steps = {g.metadata.get(STEP_KEY) for g in groups}
            if ids != scenario_ids or steps != {step}:
                logger.info(
                    "not reusing %s: made at step(s) %s for scenarios %s (now step %d, scenarios %s)",
                    path, sorted(map(str, steps)), ids, step, scenario_ids,
                )  # fmt: skip
                continue
            return StoredBatch(groups=groups, scored=scored)
        return None
