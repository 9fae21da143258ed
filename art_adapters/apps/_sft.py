"""``art-adapters sft FILE.jsonl --model NAME``: one SFT step on a trajectories file.

The file is what ``art-adapters import`` writes (one ``Trajectory`` a line: production traces) or
groups of rollouts (a stronger model's: distillation); :func:`~art_adapters.load_trajectories`
reads both. The step trains next-token loss on the assistant turns and serves the new checkpoint as
``NAME@STEP`` on the backend (a running one with ``--backend URL``, else the embedded one).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.markup import escape

from art_adapters import (
    Backend,
    LocalBackend,
    RemoteBackend,
    SFTConfig,
    TrainableModel,
    TrainResult,
    load_trajectories,
)

from ._options import Setting

__all__ = ["EMBEDDED", "SFT_HELP", "SFT_OPTIONS", "SftCommand", "report", "run_sft"]

logger = logging.getLogger(__name__)

#: The value of ``--backend`` that starts the embedded backend (the default).
EMBEDDED = "embedded"

SFT_HELP = (
    "Train one SFT step on a trajectories file and serve the new checkpoint as NAME@STEP.\n\n"
    "FILE.jsonl holds one trajectory a line, as `art-adapters import` writes it (production traces), "
    "or trajectory groups (a stronger model's rollouts: distillation). The step trains next-token "
    "cross-entropy on the assistant turns (the exact tokens where the backend recorded them, the chat "
    "template's elsewhere) for --epochs passes; GRPO steps continue from its checkpoint. The model is "
    "registered on the backend when it is not yet (step 0: the base weights)."
)


class SftCommand(BaseModel):
    """The settings of ``art-adapters sft`` (each is a command-line option).

    Attributes:
        file: the trajectories file (JSON Lines).
        model: the trained model's name (served as NAME and NAME@STEP).
        project: the model's project, when it is registered here. Default ``default``.
        base_model: the model's base weights, when it is registered here (the bundled
            ``smollm2-135m-instruct`` by default).
        backend: a running backend's URL (``art-adapters serve``); ``embedded`` (default) starts the
            embedded one on ``run_dir``.
        run_dir: the embedded backend's run directory (checkpoints, records). Default ``.art/backend``.
        api_key: the backend's API key.
        sft: the step's :class:`~art_adapters.SFTConfig`.
    """

    model_config = ConfigDict(extra="forbid")

    file: Path
    model: str
    project: str = "default"
    base_model: str = "smollm2-135m-instruct"
    backend: str = EMBEDDED
    run_dir: Path = Path(".art/backend")
    api_key: str | None = Field(default=None, repr=False)
    sft: SFTConfig = Field(default_factory=SFTConfig)


#: ``sft``'s options, in help order: the command's settings, then SFTConfig's scalar fields.
SFT_OPTIONS = [
    Setting("file", argument=True, extra={"metavar": "FILE.jsonl"}),
    Setting("model", extra={"metavar": "NAME"}),
    Setting("project"),
    Setting("base_model"),
    Setting("backend", extra={"metavar": "URL|embedded"}),
    Setting("run_dir"),
    Setting("api_key", extra={"envvar": "ART_ADAPTERS_API_KEY", "show_default": False}),
    *(
        Setting(f"sft.{name}")
        for name in (
            "learning_rate", "weight_decay", "epochs", "batch_size", "micro_batch_size",
            "max_sequence_length", "max_grad_norm", "only_model", "lora_rank", "lora_alpha", "lora_dropout",
            "seed",
        )
    ),  # fmt: skip
]


async def _backend(command: SftCommand) -> tuple[Backend, bool]:
    """The backend to train on, and whether this command started it (and so stops it)."""
    if command.backend != EMBEDDED:
        return RemoteBackend(command.backend, api_key=command.api_key), False
    local = LocalBackend(run_dir=command.run_dir, base_model=command.base_model, api_key=command.api_key)
    return await local.start(), True


async def run_sft(command: SftCommand, *, console: Any | None = None) -> TrainResult:
    """Read the file, register the model (idempotent) and train one SFT step; returns its result.

    Raises:
        ConfigError: the file is missing, empty or malformed (with its line number).
        BackendRequestError: the backend refused the step (e.g. 400: no assistant turn).
    """
    console = console or Console()
    trajectories = load_trajectories(command.file)  # before any backend starts: a bad file fails fast
    console.print(f"{len(trajectories)} trajectories from {escape(str(command.file))}")
    backend, owned = await _backend(command)
    try:
        model = TrainableModel(name=command.model, project=command.project, base_model=command.base_model)
        await model.register(backend)
        with console.status(f"SFT step of {escape(command.model)} on {escape(backend.base_url)}..."):
            return await model.train_sft(trajectories, config=command.sft)
    finally:
        if isinstance(backend, LocalBackend) and owned:
            await backend.close()  # stops the embedded backend this command started
        else:
            await backend.aclose()


def report(result: TrainResult, command: SftCommand, console: Any) -> None:
    """Print what the step did: the served checkpoint and its loss, tokens and sequences."""
    if not result.trained:
        reason = escape(result.reason or "")
        console.print(f"[red]nothing trained (still at step {result.step}): {reason}[/red]")
        return
    m = result.metrics
    console.print(
        f"[green]{escape(command.model)}@{result.step}[/green] trained and served: loss "
        f"{m.get('first_pass_loss', float('nan')):.4f} -> {m.get('loss', float('nan')):.4f} over "
        f"{m.get('epochs')} epoch(s), {m.get('sequences')} sequences, {m.get('tokens')} loss tokens, "
        f"learning rate {m.get('learning_rate')}, {m.get('total_seconds', 0.0):.1f} s"
    )
    if result.deleted_steps:
        console.print(f"retention deleted steps {result.deleted_steps}")
