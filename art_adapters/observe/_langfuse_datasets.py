"""Held-out evaluations as Langfuse experiments: a dataset of the validation scenarios, a run per checkpoint.

The dataset and its items are upserted with the SDK's API client (``datasets.create``,
``dataset_items.create``) on item ids derived from the dataset name and scenario id, so a rerun adds
nothing. A rollout joins run ``<model>@<step>`` through the experiment span attributes Langfuse v4
builds experiment runs from (``langfuse.experiment.*``; the SDK v5 has no run-item endpoint), set on its
rollout span before it ends. Best effort: a failure is one warning and the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Mapping

from art_adapters._trajectory import TrajectoryGroup

__all__ = ["LangfuseDatasets", "dataset_item_id", "experiment_attributes"]

logger = logging.getLogger("art_adapters.observe")


def dataset_item_id(dataset: str, scenario_id: str) -> str:
    """The item id of a scenario in ``dataset`` (32 hex digits): stable, and unique across datasets."""
    return hashlib.sha256(json.dumps(["art-adapters-item", dataset, scenario_id]).encode()).hexdigest()[:32]


def experiment_attributes(
    *, dataset_id: str, run_name: str, item_id: str, root_observation_id: str
) -> dict[str, str]:
    """The ``langfuse.experiment.*`` span attributes putting one rollout in run ``run_name`` of a dataset."""
    run_id = hashlib.sha256(json.dumps(["art-adapters-run", dataset_id, run_name]).encode()).hexdigest()[:16]
    return {
        "langfuse.experiment.id": run_id,
        "langfuse.experiment.name": run_name,
        "langfuse.experiment.dataset.id": dataset_id,
        "langfuse.experiment.item.id": item_id,
        "langfuse.experiment.item.root_observation_id": root_observation_id,
    }


class LangfuseDatasets:
    """Upsert datasets of scenarios and name the experiment attributes of their rollouts (one per run)."""

    def __init__(self, public_key: str, secret_key: str, base_url: str, *, timeout_s: float = 10.0) -> None:
        from langfuse.api import LangfuseAPI

        self.base_url = base_url.rstrip("/")
        self._api = LangfuseAPI(
            base_url=self.base_url, username=public_key, password=secret_key,
            x_langfuse_public_key=public_key, x_langfuse_sdk_name="art-adapters", timeout=timeout_s,
        )  # fmt: skip
        self._dataset_ids: dict[str, str] = {}
        self._items: set[str] = set()  # item ids already upserted by this client
        self._lock = threading.Lock()

    def _upsert(self, dataset: str, groups: list[TrajectoryGroup]) -> str:
        with self._lock:
            if dataset not in self._dataset_ids:
                created = self._api.datasets.create(
                    name=dataset, description="art-adapters held-out scenarios",
                    metadata={"source": "art-adapters"},
                )  # fmt: skip
                self._dataset_ids[dataset] = created.id
            for group in groups:
                sid = str(group.metadata.get("scenario_id"))
                item_id = dataset_item_id(dataset, sid)
                if item_id in self._items:
                    continue
                self._api.dataset_items.create(
                    dataset_name=dataset, id=item_id, input=group.metadata.get("scenario", {"id": sid}),
                    metadata={"scenario_id": sid},
                )  # fmt: skip
                self._items.add(item_id)
            return self._dataset_ids[dataset]

    def run_attributes(
        self, dataset: str, run_name: str, groups: Iterable[TrajectoryGroup]
    ) -> dict[str, Mapping[str, str]]:
        """Upsert ``dataset`` with the groups' scenarios; the experiment attributes of each live rollout
        (trajectory id -> attributes) in run ``run_name``. Empty, with a warning, when Langfuse fails."""
        groups = [g for g in groups if g.metadata.get("scenario_id") is not None]
        try:
            dataset_id = self._upsert(dataset, groups)
        except Exception as exc:  # the SDK's ApiError, httpx errors: an experiment is never worth a crash
            logger.warning(
                "observe: Langfuse dataset %r not updated at %s (%s: %s); run %s is not an experiment run",
                dataset, self.base_url, type(exc).__name__, exc, run_name,
            )  # fmt: skip
            return {}
        attributes: dict[str, Mapping[str, str]] = {}
        for group in groups:
            item_id = dataset_item_id(dataset, str(group.metadata["scenario_id"]))
            for trajectory in group.trajectories:
                span_id = trajectory.metadata.get("rollout_span_id")
                if isinstance(span_id, str):  # traced live: its rollout span is the item's root
                    attributes[trajectory.id] = experiment_attributes(
                        dataset_id=dataset_id, run_name=run_name, item_id=item_id, root_observation_id=span_id
                    )
        return attributes
