"""Experiment trackers: Weights & Biases and Trackio, one row per training step, on when configured.

:func:`trackers_from_env` turns them on from the variables the trackers' own SDKs read (so a W&B or
Trackio user sets nothing new); tracking never breaks training (:func:`guarded`).
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import shlex
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from art_adapters._errors import ConfigError

__all__ = [
    "TRACKERS_ENV",
    "Tracker",
    "TrackioTracker",
    "WandbTracker",
    "guarded",
    "numeric_row",
    "trackers_from_env",
]

logger = logging.getLogger(__name__)

TRACKERS_ENV = "ART_ADAPTERS_TRACKERS"
"""Environment variable listing the trackers to use, exactly (``wandb,trackio``; ``none`` for none)."""

_KNOWN = ("wandb", "trackio")
#: How to install each tracker's SDK (its package has the tracker's name).
_PIP = {name: f"pip install 'art-adapters[trackers]' (or: pip install {name})" for name in _KNOWN}
# Trackio's own variables (documented in trackio.init and its README), plus ours for the project name.
_TRACKIO_VARS = ("TRACKIO_DIR", "TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_PROJECT")


@runtime_checkable
class Tracker(Protocol):
    """An experiment tracker the training loop logs one row per step to.

    Attributes:
        name: short name of the tracker (``"wandb"``, ``"trackio"``).
        where: one human line saying where the run can be seen: a URL, or a local folder and the
            command that shows or uploads it.
    """

    name: str
    where: str

    def log(self, step: int, row: Mapping[str, Any], *, split: str = "train") -> None:
        """Log one row at ``step``: its finite numeric values, keys prefixed ``f"{split}/"``.

        Non-numeric values (strings, lists, ``None``), booleans, NaN and infinities are left out,
        and so is a ``"step"`` key (the step is the row's x-axis). A row with nothing left logs
        nothing. Never raises for a tracking problem once wrapped by :func:`guarded`.
        """
        ...

    def finish(self) -> None:
        """Flush and close the run; later calls to :meth:`log` are not expected."""
        ...


def numeric_row(row: Mapping[str, Any], split: str) -> dict[str, int | float]:
    """The finite numeric values of ``row`` with keys ``f"{split}/{key}"`` (no ``step``, no bools)."""
    out: dict[str, int | float] = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        number = int(value) if isinstance(value, numbers.Integral) else float(value)
        if math.isfinite(number):
            out[f"{split}/{key}"] = number
    return out


class _Guarded:
    """Runs a tracker's calls so that the first failure logs one warning and switches it off.

    Attributes:
        name: the tracker's short name.
        failures: calls that raised (one at most: the tracker is off after it).
        dropped: rows not delivered because of that failure: the row whose ``log`` raised and
            every row logged after it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.failures = 0
        self.dropped = 0
        self._failed = False
        self._finished = False
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """False once finished, or once a call has failed: the tracker is skipped from then on."""
        return not (self._failed or self._finished)

    def _call(self, what: str, fn: Callable[[], None]) -> None:
        if self._finished:
            return
        if self._failed:
            self.dropped += what == "log"
            return
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - tracking must never break training
            with self._lock:
                first = not self._failed
                self._failed = True
                self.failures += first
                self.dropped += what == "log"
            if first:
                logger.warning(
                    "trackers: %s %s failed (%s: %s); %s logging is off for the rest of this run",
                    self.name,
                    what,
                    type(exc).__name__,
                    exc,
                    self.name,
                )

    def _finish(self, fn: Callable[[], None]) -> None:
        self._call("finish", fn)
        self._finished = True


class _RunTracker(_Guarded):
    """A tracker that logs to the run object its SDK's ``init`` returned (``self.run``), guarded."""

    run: Any
    where: str

    def log(self, step: int, row: Mapping[str, Any], *, split: str = "train") -> None:
        """Log the row's numeric values as ``f"{split}/{key}"`` at ``step`` (see :class:`Tracker`)."""
        values = numeric_row(row, split)
        if values:
            self._call("log", lambda: self.run.log(values, step=step))

    def finish(self) -> None:
        """Finish the run (W&B uploads what is left when online; Trackio waits up to 30 s for its store)."""
        self._finish(self.run.finish)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where!r})"


class WandbTracker(_RunTracker):
    """Logs rows to a Weights & Biases run of its own (``wandb.init(..., reinit="create_new")``).

    The run is created here and used through the object ``wandb.init`` returned, never through the
    module-level ``wandb.run`` / ``wandb.log``: a run the user already has open is neither reused
    nor finished. ``WANDB_MODE``, ``WANDB_DIR`` and the other ``WANDB_*`` variables keep their usual
    meaning; ``mode`` and ``dir`` given here win over them.

    Online, ``wandb.init`` waits for the W&B server: when it cannot be reached, for W&B's
    ``init_timeout`` (90 s by default; ``WANDB_INIT_TIMEOUT=10`` shortens it) before it raises, and
    :func:`trackers_from_env` then goes on without W&B (measured: 90.7 s, 5.7 s with
    ``WANDB_INIT_TIMEOUT=5``, against a refused connection). Offline mode never waits. W&B keeps one
    row per step: rows of several splits logged at the same step land in the same W&B row; a step
    lower than one already logged is dropped by W&B with its own warning.

    Args:
        project: W&B project.
        run: display name of the run.
        config: hyperparameters shown with the run (JSON-like values).
        dir: folder under which ``wandb/`` is written; ``None``: ``WANDB_DIR``, else the current one.
        mode: ``"online"``, ``"offline"`` or ``"disabled"``; ``None``: ``WANDB_MODE``, else online.
        entity: W&B entity (user or team); ``None``: ``WANDB_ENTITY`` or the account's default.

    Raises:
        ImportError: ``wandb`` is not installed (:func:`trackers_from_env` turns it into a warning or
            a :class:`ConfigError`).
    """

    def __init__(
        self,
        *,
        project: str,
        run: str,
        config: Mapping[str, Any] | None = None,
        dir: str | os.PathLike[str] | None = None,  # noqa: A002 - wandb.init's own name
        mode: str | None = None,
        entity: str | None = None,
    ) -> None:
        super().__init__("wandb")
        import wandb

        kwargs: dict[str, Any] = {"project": project, "name": run, "config": dict(config or {})}
        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
            kwargs["dir"] = str(dir)
        if mode is not None:
            kwargs["mode"] = mode
        if entity is not None:
            kwargs["entity"] = entity
        self.run: Any = wandb.init(reinit="create_new", **kwargs)
        """The ``wandb.Run`` this tracker logs to."""
        self.where = self._where()

    def _where(self) -> str:
        run = self.run
        if run.disabled:
            return "W&B: disabled (mode 'disabled'), nothing is logged"
        if run.offline:
            sync_dir = run.sync_dir
            return f"W&B (offline): {sync_dir}; upload it with: wandb sync {shlex.quote(sync_dir)}"
        return f"W&B: {run.url}"



class TrackioTracker(_RunTracker):
    """Logs rows to a Trackio run (``trackio.init(project=..., name=...)``), used through the object
    that call returns.

    Trackio keeps one current run per process: ``trackio.init`` finishes the one a user had open.
    Where the rows go is Trackio's own configuration: locally (the default) a SQLite store under
    ``TRACKIO_DIR`` (read when ``trackio`` is first imported; default ``$HF_HOME/trackio``), or a
    Hugging Face Space (``TRACKIO_SPACE_ID``) or a self-hosted server (``TRACKIO_SERVER_URL``).

    Args:
        project: Trackio project.
        run: run name (Trackio keeps runs of the same name apart by id).
        config: hyperparameters shown with the run.

    Raises:
        ImportError: ``trackio`` is not installed.
    """

    def __init__(self, *, project: str, run: str, config: Mapping[str, Any] | None = None) -> None:
        super().__init__("trackio")
        import trackio

        self.project = project
        self.run: Any = trackio.init(project=project, name=run, config=dict(config or {}), embed=False)
        """The ``trackio.Run`` this tracker logs to."""
        self.where = self._where(trackio)

    def _where(self, trackio: Any) -> str:
        label = f"project {self.project!r}, run {self.run.name!r}"
        url = getattr(self.run, "url", None)
        if url:
            if not url.startswith(("http://", "https://")):  # a Space id
                url = f"https://huggingface.co/spaces/{url}"
            return f"Trackio: {url} ({label})"
        # trackio.TRACKIO_DIR: the folder Trackio resolved from TRACKIO_DIR / HF_HOME when imported.
        default = os.environ.get("TRACKIO_DIR", "$HF_HOME/trackio")
        folder = str(getattr(trackio, "TRACKIO_DIR", None) or default)
        show = f"trackio show --project {shlex.quote(self.project)}"
        if os.environ.get("TRACKIO_DIR"):  # `trackio show` reads the store from the same variable
            show = f"TRACKIO_DIR={shlex.quote(folder)} {show}"
        return f"Trackio (local, {label}): {folder}; view it with: {show}"


class _GuardedTracker(_Guarded):
    """:func:`guarded`'s wrapper around a tracker of the user's own."""

    def __init__(self, tracker: Tracker) -> None:
        super().__init__(getattr(tracker, "name", type(tracker).__name__))
        self.tracker = tracker
        self.where = str(getattr(tracker, "where", ""))

    def log(self, step: int, row: Mapping[str, Any], *, split: str = "train") -> None:
        """Pass the row on; the first exception warns once and switches the tracker off."""
        self._call("log", lambda: self.tracker.log(step, row, split=split))

    def finish(self) -> None:
        """Finish the wrapped tracker, with the same guard."""
        self._finish(self.tracker.finish)


def guarded(tracker: Tracker) -> Tracker:
    """``tracker`` with the guard the built-in trackers have: the first ``log`` / ``finish`` that
    raises logs one warning, and every later call is skipped. Built-in trackers come back as they are.
    """
    return tracker if isinstance(tracker, _Guarded) else _GuardedTracker(tracker)


def _explicit(environ: Mapping[str, str]) -> list[str] | None:
    text = environ.get(TRACKERS_ENV)
    if text is None or not text.strip():
        return None
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if names == ["none"]:
        return []
    unknown = [n for n in names if n not in _KNOWN]
    if unknown:
        raise ConfigError(
            f"{TRACKERS_ENV}={text!r}: unknown tracker(s) {unknown}; use a comma-separated list of "
            f"{', '.join(_KNOWN)}, or 'none'"
        )
    return list(dict.fromkeys(names))


def _from_env(environ: Mapping[str, str]) -> list[str]:
    names = []
    mode = environ.get("WANDB_MODE", "").strip().lower()
    if (environ.get("WANDB_API_KEY") or mode) and mode != "disabled":
        names.append("wandb")
    if any(environ.get(var) for var in _TRACKIO_VARS):
        names.append("trackio")
    return names


def trackers_from_env(
    *,
    project: str,
    run: str,
    config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    directory: str | os.PathLike[str] | None = None,
) -> list[Tracker]:
    """The trackers the environment configures, each with its run started.

    ::

        trackers = trackers_from_env(project="demo", run="agent", config={"lr": 2e-4})
        for t in trackers:
            print(t.where)                          # where the run can be seen
        for t in trackers:
            t.log(step, {"loss": 0.41, "reward": 0.6})            # -> train/loss, train/reward at step
            t.log(step, {"reward": 0.7}, split="val")             # -> val/reward at step
        for t in trackers:
            t.finish()

    Which trackers :func:`trackers_from_env` turns on, from the environment (the variables the
    trackers' own SDKs read, so a W&B or Trackio user sets nothing new):

    - **W&B** when ``WANDB_API_KEY`` or ``WANDB_MODE`` is set (``WANDB_MODE=disabled`` turns it off;
      ``WANDB_MODE=offline`` writes the run under ``WANDB_DIR``, to upload later with ``wandb sync``).
      ``WANDB_PROJECT``, ``WANDB_ENTITY`` and ``WANDB_NAME`` override the project, entity and run name.
    - **Trackio** when one of its own variables is set: ``TRACKIO_DIR`` (local mode: a SQLite store in
      that folder), ``TRACKIO_SPACE_ID`` (a Hugging Face Space) or ``TRACKIO_SERVER_URL`` (a self-hosted
      server), or ``TRACKIO_PROJECT`` (ours: the Trackio project name; local store in Trackio's default
      folder, ``$HF_HOME/trackio``).
    - ``ART_ADAPTERS_TRACKERS`` overrides both: a comma-separated list (``wandb``, ``trackio``, or
      ``none``) that is exactly the trackers to use, each required: a listed tracker whose package is
      missing is a :class:`~art_adapters._errors.ConfigError` naming the ``pip install`` to run.

    A tracker found from the environment whose package is missing is skipped with one warning. Tracking
    never breaks training: a tracker that fails to start, or whose ``log`` / ``finish`` raises, logs one
    warning and is skipped from then on (:func:`guarded` gives a tracker of your own the same guard).
    Both SDKs are imported only when their tracker is created.

    Args:
        project: project name in each tracker (``WANDB_PROJECT`` / ``TRACKIO_PROJECT`` win over it).
        run: run name (``WANDB_NAME`` wins for W&B).
        config: hyperparameters shown with the run.
        environ: the variables to read; ``None``: ``os.environ``. Which trackers start, and W&B's
            mode, folder, project, entity and name are taken from it; the SDKs still read their
            other settings (``WANDB_SILENT``, Trackio's ``TRACKIO_DIR``...) from the process.
        directory: folder for W&B's ``wandb/`` when ``WANDB_DIR`` is not set (a training loop
            passes its run directory); ``None``: the current folder.

    Returns:
        The started trackers (possibly none), each guarded: ``log`` / ``finish`` never raise.

    Raises:
        ConfigError: ``ART_ADAPTERS_TRACKERS`` names an unknown tracker, or one whose package is not
            installed (the message names the ``pip install`` to run).
    """
    env = os.environ if environ is None else environ
    explicit = _explicit(env)
    names = _from_env(env) if explicit is None else explicit
    trackers: list[Tracker] = []
    for name in names:
        try:
            if name == "wandb":
                tracker: Tracker = WandbTracker(
                    project=env.get("WANDB_PROJECT") or project,
                    run=env.get("WANDB_NAME") or run,
                    config=config,
                    dir=env.get("WANDB_DIR") or directory,
                    mode=env.get("WANDB_MODE") or None,
                    entity=env.get("WANDB_ENTITY") or None,
                )
            else:
                tracker = TrackioTracker(
                    project=env.get("TRACKIO_PROJECT") or project, run=run, config=config
                )
        except ImportError as exc:
            if explicit is not None:
                raise ConfigError(
                    f"{TRACKERS_ENV} lists {name!r} but the {name} package is not installed: {_PIP[name]}"
                ) from exc
            logger.warning(
                "trackers: %s is configured by the environment but not installed; %s logging is off (%s)",
                name,
                name,
                _PIP[name],
            )
            continue
        except Exception as exc:  # noqa: BLE001 - a tracker that cannot start must not stop training
            logger.warning(
                "trackers: %s could not start (%s: %s); %s logging is off",
                name,
                type(exc).__name__,
                exc,
                name,
            )
            continue
        trackers.append(tracker)
        logger.info("trackers: %s", tracker.where)
    return trackers
