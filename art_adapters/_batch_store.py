"""The training loop's rollouts on disk, so a crash before the train step loses none.

Rollouts are the expensive part of a step (a real agent may take minutes per scenario), and
scoring can fail (a judge endpoint down): :func:`~art_adapters.train_loop` saves each batch's groups
here (``run_dir/batches/``) before and after scoring, and a restarted loop reuses them;
:class:`GroupStore` does the same per group for the pipelined loop (``LoopConfig.max_staleness``).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ._trajectory import TrajectoryGroup, load_groups, save_groups

__all__ = ["BatchStore", "GroupStore", "StoredBatch", "StoredGroup"]

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


@dataclass
class StoredGroup:
    """A pipelined group found on disk, neither trained nor dropped yet.

    Attributes:
        key: its place in the run's stream of groups (``batch-position``).
        group: the group (with rewards when ``scored``).
        scored: whether the scorer has run on it.
        sampled_step: the checkpoint its rollouts were sampled from.
    """

    key: str
    group: TrajectoryGroup
    scored: bool
    sampled_step: int


class GroupStore:
    """The pipelined loop's groups on disk (``run_dir/batches/pipeline/``), one file per group::

        group-000004-01.rollouts.jsonl   written when the group's rollouts end
        group-000004-01.scored.jsonl     the same group once scored
        events.jsonl                     {"event": ..., "keys": [...], "step": t} (t: the model step then)

    A group stays *pending* until an event closes it: ``trained`` (a step used it), ``dropped``
    (too stale) or ``skipped`` (no reward spread, or unscorable). ``training`` is written just
    before a step is sent; a restart that finds the model already past that step knows the step
    landed and closes its groups (:meth:`pending`), so no group is trained twice.

    Args:
        run_dir: the loop's run directory.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.folder = Path(run_dir) / "batches" / "pipeline"

    @staticmethod
    def key(batch: int, position: int) -> str:
        """The key of the group at ``position`` in ``batch``."""
        return f"{batch:06d}-{position:02d}"

    def save(self, key: str, group: TrajectoryGroup, sampled_step: int, *, scored: bool) -> Path:
        """Write one group (sampled at ``sampled_step``) atomically; returns the file."""
        group.metadata[STEP_KEY] = sampled_step
        name = f"group-{key}.{'scored' if scored else 'rollouts'}.jsonl"
        return save_groups(self.folder / name, [group])

    def mark(self, event: str, keys: list[str], step: int) -> None:
        """Append ``event`` for ``keys`` at model ``step`` to ``events.jsonl`` (flushed to disk)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / "events.jsonl").open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": event, "keys": keys, "step": step}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _events(self) -> list[dict[str, object]]:
        path = self.folder / "events.jsonl"
        if not path.is_file():
            return []
        events = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:  # a line cut short by a crash
                logger.warning("ignoring a malformed line of %s: %r", path, line[:80])
        return events

    def _keys(self) -> list[str]:
        return sorted({p.name.split(".")[0].removeprefix("group-") for p in self.folder.glob("group-*.jsonl")})

    def last_position(self) -> tuple[int, int] | None:
        """``(batch, position)`` of the last group stored, or ``None``."""
        keys = self._keys()
        if not keys:
            return None
        batch, position = keys[-1].split("-")
        return int(batch), int(position)

    def pending(self, model_step: int) -> list[StoredGroup]:
        """The groups stored but neither trained, dropped nor skipped, in stream order.

        A ``training`` event for a step the model (now at ``model_step``) has passed means that
        step landed before a crash: its groups are marked ``trained`` here.
        """
        closed: set[str] = set()
        in_flight: list[dict[str, object]] = []
        for event in self._events():
            keys = [str(k) for k in event.get("keys", []) or []]  # type: ignore[union-attr]
            if event.get("event") == "training":
                in_flight.append(event)
            else:
                closed.update(keys)
        for event in in_flight:
            keys = [str(k) for k in event.get("keys", []) or []]  # type: ignore[union-attr]
            step = event.get("step")
            if isinstance(step, int) and step < model_step and not set(keys) <= closed:
                logger.info("the step from %d landed before the restart: its groups %s count as trained", step, keys)
                self.mark("trained", keys, step)
                closed.update(keys)
        out: list[StoredGroup] = []
        for key in self._keys():
            if key in closed:
                continue
            for scored in (True, False):
                candidate = self.folder / f"group-{key}.{'scored' if scored else 'rollouts'}.jsonl"
                if not candidate.is_file():
                    continue
                try:
                    (group,) = load_groups(candidate)
                except (OSError, ValueError) as exc:
                    logger.warning("ignoring %s: %s", candidate, exc)
                    continue
                step = group.metadata.get(STEP_KEY)
                if isinstance(step, int):
                    out.append(StoredGroup(key, group, scored, step))
                    break
        return out
