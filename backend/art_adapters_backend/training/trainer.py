"""The trainer interface and the one update loop every objective (GRPO, SFT) and every LoRA trainer shares.

:class:`LoraTrainer` writes the loop (:meth:`~LoraTrainer.run_step`), saving and loading once; an objective
(:mod:`.grpo_step`, :mod:`.sft`) says what an update's loss is; a subclass only says how the base model is
loaded and the LoRA attached (:mod:`.peft_trainer`, :mod:`.unsloth_trainer`).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from art_adapters import TrainConfig
from art_adapters.files import atomic_directory

from ..threads import set_torch_threads
from .cancel import TrainingCancelledError
from .batches import Batch, check_sequences
from .data import NothingTrainableError, RecordLookup, Renderer, TrainingSequence
from .groups import build_sequences
from .grpo import kept_token_logprobs, logits_keep_mask, token_logprobs
from .grpo_step import GroupsStepResult, GrpoObjective, StepMetrics, schedule_inputs
from .sft import SFTMetrics, SftObjective, SFTStepResult, nothing_trainable_reason, sft_sequences
from .step import Objective, Update, UpdateResult

if TYPE_CHECKING:
    from peft import PeftModel

    from art_adapters import SFTConfig, Trajectory, TrajectoryGroup

__all__ = ["LoraTrainer"]

logger = logging.getLogger(__name__)

OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "trainer_state.json"


class LoraTrainer(ABC):
    """A LoRA trainer: one base model, one adapter, one GRPO optimizer; the update loop shared by all.

    It owns a PEFT-wrapped causal LM and an AdamW optimizer over its LoRA weights. Subclasses
    implement :meth:`_load_base` and :meth:`_attach_lora` (:mod:`.peft_trainer` with plain
    transformers + PEFT, :mod:`.unsloth_trainer` with Unsloth's ``FastLanguageModel``).

    Args:
        model_path: a local Hugging Face causal-LM folder.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
    """

    def __init__(self, model_path: str | os.PathLike[str], device: str = "cpu") -> None:
        self.model_path = Path(model_path)
        self.device = torch.device(device)
        set_torch_threads()  # $ART_ADAPTERS_TORCH_THREADS, as the engine: tests and loaded machines pin threads
        self.base, self.pad_token_id = self._load_base()
        self.model: PeftModel | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.steps_done = 0
        self.lora: dict[str, Any] | None = None
        #: The learning-rate schedule's inputs of the adapter's last step (saved with it), or None.
        self.schedule: dict[str, Any] | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ cancellation

    def cancel(self) -> None:
        """Stop the running step and any later one at the next micro-batch (thread-safe).

        A worker thread cannot be interrupted, so the steps check :meth:`check_cancelled` between
        micro-batches: a server stopping mid-step waits for one forward/backward pass, not the step.
        """
        self._stop.set()

    def check_cancelled(self) -> None:
        """Raise :class:`TrainingCancelledError` once :meth:`cancel` was called."""
        if self._stop.is_set():
            raise TrainingCancelledError("the training step was cancelled: the server is stopping")

    # ------------------------------------------------------------------ what subclasses provide

    @abstractmethod
    def _load_base(self) -> tuple[torch.nn.Module, int]:
        """Load the base model (on ``self.device``) and return it with the pad token id."""

    @abstractmethod
    def _attach_lora(self, config: TrainConfig) -> PeftModel:
        """Wrap ``self.base`` with a fresh trainable LoRA adapter shaped by ``config``."""

    def _wrap_saved(self, folder: Path) -> PeftModel:
        """Wrap ``self.base`` with the adapter saved in ``folder``, trainable."""
        from peft import PeftModel

        return PeftModel.from_pretrained(self.base, str(folder), is_trainable=True)

    # ------------------------------------------------------------------ adapter lifecycle

    @property
    def has_adapter(self) -> bool:
        """Whether an adapter exists (created by the first step or loaded)."""
        return self.model is not None

    def ensure_adapter(self, config: TrainConfig) -> None:
        """Create the LoRA adapter from ``config``'s ``lora_*`` fields unless one exists."""
        if self.model is not None:
            shape = {"r": config.lora_rank, "lora_alpha": config.lora_alpha}
            if self.lora is not None and any(self.lora.get(k) != v for k, v in shape.items()):
                logger.warning(
                    "the adapter already exists with %s; lora_* settings of this step (%s) are ignored",
                    self.lora,
                    shape,
                )
            return
        if config.seed is not None:
            torch.manual_seed(config.seed)
        self.model = self._attach_lora(config)
        self.lora = {"r": config.lora_rank, "lora_alpha": config.lora_alpha}
        self._new_optimizer(config)

    def reset_adapter(self) -> None:
        """Drop the adapter and its optimizer (base weights untouched): the next step starts a fresh LoRA."""
        if self.model is not None:
            self.base = self.model.unload()
        self.model = None
        self.optimizer = None
        self.lora = None
        self.steps_done = 0
        self.schedule = None

    def _new_optimizer(self, config: TrainConfig) -> None:
        assert self.model is not None
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise RuntimeError("the adapter has no trainable parameters; check lora_target_modules")
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)

    def trainable_parameters(self) -> int:
        """Number of trainable (LoRA) parameters; 0 before the adapter exists."""
        return 0 if self.model is None else sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    # ------------------------------------------------------------------ the step

    #: Whether the model accepts a boolean (B, T) ``logits_to_keep`` (transformers 5), so the LM
    #: head runs only before loss tokens: (N, V) logits instead of (B, T, V), a memory saving for
    #: long prompts and large vocabularies (no measurable speed change for the bundled model on CPU).
    select_logits: bool = False

    def logprobs(self, batch: Batch, *, loss_only: bool = False) -> torch.Tensor:
        """(B, T) log-probs of the batch's tokens; with ``loss_only`` only before-loss positions are exact."""
        assert self.model is not None
        temperature: torch.Tensor | float = batch.temperatures
        if bool((batch.temperatures == 1.0).all()):
            temperature = 1.0
        keep = logits_keep_mask(batch.loss_mask) if loss_only and self.select_logits else None  # (B, T)
        if batch.prefix_len:
            return self._shared_prefix_logprobs(batch, temperature, keep)
        return self._forward_logprobs(batch.input_ids, temperature, keep, attention_mask=batch.attention_mask)

    def _forward_logprobs(
        self, input_ids: torch.Tensor, temperature: torch.Tensor | float, keep: torch.Tensor | None, **inputs: Any
    ) -> torch.Tensor:
        """(B, T) log-probs of ``input_ids`` from one forward pass (position 0 is 0.0); with ``keep``
        the LM head runs only where it is True (transformers' boolean ``logits_to_keep``), elsewhere 0.0."""
        assert self.model is not None
        if keep is None:
            logits = self.model(input_ids=input_ids, **inputs).logits  # (B, T, V)
            return token_logprobs(logits, input_ids, temperature)
        logits = self.model(input_ids=input_ids, logits_to_keep=keep, **inputs).logits  # (N, V)
        return kept_token_logprobs(logits, input_ids, keep, temperature)

    def _shared_prefix_logprobs(
        self, batch: Batch, temperature: torch.Tensor | float, keep: torch.Tensor | None
    ) -> torch.Tensor:
        """(B, T') log-probs of the rows' own tokens, the shared prefix forwarded once (with grad).

        The prefix's LM head runs on its last position only (it predicts each row's first own
        token); with ``keep`` (B, T') the rows' LM head runs only there, as in :meth:`logprobs`
        (a (B, T', V) logits tensor and its gradient are gigabytes for long rows).
        """
        assert self.model is not None
        rows = batch.input_ids.shape[0]
        out = self.model(input_ids=batch.prefix_ids, use_cache=True, logits_to_keep=1)  # (1, 1, V) once
        cache = out.past_key_values
        cache.batch_repeat_interleave(rows)  # (B, ...) views of the same keys/values: grads accumulate
        first = out.logits[:, -1, :].expand(rows, -1)  # (B, V): predicts each row's first own token
        pair = torch.cat([batch.prefix_ids[:, -1:].expand(rows, -1), batch.input_ids[:, :1]], dim=1)  # (B, 2)
        pair_keep = torch.tensor([[True, False]], device=pair.device).expand(rows, -1)  # (B, 2)
        head = kept_token_logprobs(first, pair, pair_keep, temperature)[:, 1:]  # (B, 1)
        own = self._forward_logprobs(
            batch.input_ids,
            temperature,
            keep,
            attention_mask=batch.attention_mask,
            past_key_values=cache,
            use_cache=False,
        )  # (B, T'), column 0 unset
        return torch.cat([head, own[:, 1:]], dim=1)  # (B, T')

    @torch.no_grad()
    def score(
        self, sequences: Sequence[TrainingSequence], config: TrainConfig | None = None
    ) -> list[list[float]]:
        """Log-probs of every token under the current policy (position 0 is 0.0), no gradient.

        Creates the adapter (from ``config`` or defaults) when none exists yet.
        """
        check_sequences(sequences)
        self.ensure_adapter(config or TrainConfig())
        assert self.model is not None
        self.model.eval()
        out: dict[int, list[float]] = {}
        size = (config or TrainConfig()).micro_batch_size
        for start in range(0, len(sequences), size):
            chunk = list(sequences[start : start + size])
            batch = Batch(chunk, self.pad_token_id, self.device)
            lp = self.logprobs(batch).cpu()
            for row, seq in enumerate(chunk):
                out[start + row] = lp[row, : len(seq.token_ids)].tolist()
        return [out[i] for i in range(len(sequences))]

    def train_step(self, sequences: Sequence[TrainingSequence], config: TrainConfig) -> StepMetrics:
        """One GRPO training step over ``sequences``: ``num_iterations`` passes, each of
        ``mini_batches`` optimizer updates (one update by default).

        The sequences are cut into mini-batches (:func:`.batches.split_mini_batches`), each sorted by
        length, cut into micro-batches of ``config.micro_batch_size`` and right-padded; each
        micro-batch's share of its mini-batch's loss (:func:`.grpo.grpo_loss`, normalised over the
        mini-batch) is back-propagated, then the gradient is clipped and applied once per
        mini-batch. The old log-probs are always the sampling ones; a token without them is scored
        by the step's starting weights (with one update: by the same forward pass, ratio exactly 1).
        The learning rate is ``config.learning_rate_at(step)`` for the adapter's step number.

        Raises:
            NothingTrainableError: no sequence, or no token carries loss (never a silent no-op).
            FloatingPointError: a loss or gradient is not finite; the weights and optimizer state
                are left as they were before the step.
            ValueError: a malformed sequence, or the step is past ``config.total_steps``.
        """
        return self.run_step(GrpoObjective(config), sequences)

    def sft_step(self, sequences: Sequence[TrainingSequence], config: SFTConfig) -> SFTMetrics:
        """One SFT step over ``sequences`` (:class:`.sft.SftObjective`); raises as :meth:`train_step`."""
        return self.run_step(SftObjective(config), sequences)

    def run_step(self, objective: Objective, sequences: Sequence[TrainingSequence]) -> Any:
        """One step of ``objective`` over ``sequences``: the one update loop every objective shares.

        Each update zeroes the gradient, back-propagates its micro-batches' losses (checking for
        cancellation between them), clips the gradient to ``objective.max_grad_norm`` and applies
        it. A non-finite loss or gradient raises :class:`FloatingPointError` and leaves the weights
        and optimizer state as they were before the step (an update is applied only when finite;
        with several updates the step's starting state is restored). Returns ``objective.metrics``.

        Raises:
            NothingTrainableError: no sequence, or no token carries loss (never a silent no-op).
            FloatingPointError: see above.
            ValueError: a malformed sequence, or a step ``objective.prepare`` refuses.
        """
        if not sequences:
            raise NothingTrainableError(f"nothing trainable: the {objective.name} step received no sequences")
        check_sequences(sequences)
        if sum(s.loss_tokens for s in sequences) == 0:
            raise NothingTrainableError(
                f"nothing trainable: none of the {len(sequences)} sequences has a loss token"
            )
        started = time.perf_counter()
        objective.prepare(self)
        self.check_cancelled()
        self.ensure_adapter(objective.adapter_config())
        self.check_cancelled()
        assert self.model is not None
        optimizer = objective.optimizer(self)
        if objective.seed is not None:
            torch.manual_seed(objective.seed + self.steps_done)
        passes = objective.plan(self, sequences)
        updates = sum(len(p) for p in passes)
        snapshot = None
        if updates > 1:  # a failed later update must undo the earlier ones
            objective.before_updates(self, passes)
            snapshot = self._snapshot(optimizer)
        self.model.train()
        done: list[UpdateResult] = []
        try:
            for index, updates_of_pass in enumerate(passes):
                for update in updates_of_pass:
                    where = f" at update {len(done) + 1} of {updates}" if updates > 1 else ""
                    done.append(self._apply_update(objective, optimizer, index, update, where))
        except FloatingPointError:
            if snapshot is not None:
                self._restore(snapshot, optimizer)
            raise
        self.steps_done += 1
        return objective.metrics(self, sequences, done, time.perf_counter() - started)

    def _apply_update(
        self, objective: Objective, optimizer: torch.optim.Optimizer, index: int, update: Update, where: str
    ) -> UpdateResult:
        """One optimizer update over ``update``'s micro-batches (``where`` names it in errors)."""
        optimizer.zero_grad(set_to_none=True)
        result = UpdateResult(index, update, 0.0, 0.0)
        for batch in update.batches:
            self.check_cancelled()  # a stopping server waits for one micro-batch, not the step
            loss, extra = objective.micro_loss(self, batch, update)
            loss.backward()
            result.loss += float(loss.detach())
            result.extras.append(extra)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        max_norm = objective.max_grad_norm if objective.max_grad_norm is not None else float("inf")
        result.grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if not (math.isfinite(result.loss) and math.isfinite(result.grad_norm)):
            optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(
                f"non-finite {objective.name} step{where} (loss {result.loss}, grad norm {result.grad_norm}); "
                f"weights unchanged: {objective.advice}"
            )
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return result

    @torch.no_grad()
    def score_unknown_old_logprobs(self, batches: Sequence[Batch]) -> None:
        """Fill unknown (NaN) old log-probs on loss tokens with the current weights' (eval mode)."""
        assert self.model is not None
        self.model.eval()
        for batch in batches:
            self.check_cancelled()
            unknown = torch.isnan(batch.old_logprobs) & (batch.loss_mask > 0)
            if bool(unknown.any()):
                current = self.logprobs(batch, loss_only=True).to(batch.old_logprobs.dtype)
                batch.old_logprobs = torch.where(unknown, current, batch.old_logprobs)

    def _snapshot(self, optimizer: torch.optim.Optimizer) -> tuple[list[torch.Tensor], dict[str, Any]]:
        """A copy of the trainable weights and the optimizer state (LoRA-sized), to undo a failed step."""
        assert self.model is not None
        weights = [p.detach().clone() for p in self.model.parameters() if p.requires_grad]
        return weights, copy.deepcopy(optimizer.state_dict())

    def _restore(self, snapshot: tuple[list[torch.Tensor], dict[str, Any]], optimizer: torch.optim.Optimizer) -> None:
        assert self.model is not None
        weights, state = snapshot
        with torch.no_grad():
            for param, saved in zip(
                [p for p in self.model.parameters() if p.requires_grad], weights, strict=True
            ):
                param.copy_(saved)
        optimizer.load_state_dict(state)

    def note_schedule(self, config: TrainConfig) -> None:
        """Remember the schedule's inputs (saved with the adapter); warn when a step changes them."""
        inputs = schedule_inputs(config)
        if self.schedule is not None and self.schedule != inputs:
            logger.warning(
                "the learning-rate schedule changes at step %d: %s, was %s",
                self.steps_done, inputs, self.schedule,
            )  # fmt: skip
        self.schedule = inputs

    def train_groups(
        self,
        groups: Sequence[TrajectoryGroup],
        get_record: RecordLookup,
        render: Renderer | None,
        config: TrainConfig,
        *,
        policy: str | None = None,
    ) -> GroupsStepResult:
        """Build sequences from scored groups (:func:`.groups.build_sequences`) and train one step.

        ``policy`` names the model being trained: only its assistant turns get loss, other
        models' turns in the same graph are prompt (``None``: every sampled turn).
        When no group carries signal the result says so (``trained=False`` and the reason);
        no update happens and no exception is raised, so the caller can report it.
        """
        built = build_sequences(
            groups,
            get_record,
            render,
            policy=policy,
            scale_rewards=config.scale_rewards,
            max_sequence_length=config.max_sequence_length,
            credit=config.credit,
        )
        self.check_cancelled()
        reason = built.nothing_trainable_reason
        if reason is not None:
            logger.warning("training step skipped: %s", reason)
            return GroupsStepResult(trained=False, nothing_trainable_reason=reason, data=built.metrics)
        return GroupsStepResult(
            trained=True, data=built.metrics, step=self.train_step(built.sequences, config)
        )

    def train_sft(
        self,
        trajectories: Sequence[Trajectory],
        get_record: RecordLookup,
        render: Renderer | None,
        config: SFTConfig,
    ) -> SFTStepResult:
        """One SFT step on the trajectories' assistant turns, on this adapter (see :mod:`.sft`).

        When no sequence has a loss token the result says why (``trained=False``), nothing is
        updated and nothing raised, as for a GRPO step without signal.
        """
        built = sft_sequences(
            trajectories, get_record, render,
            only_model=config.only_model, max_sequence_length=config.max_sequence_length,
        )  # fmt: skip
        self.check_cancelled()
        if not built.sequences:
            reason = nothing_trainable_reason(built.metrics, len(trajectories))
            logger.warning("SFT step skipped: %s", reason)
            return SFTStepResult(trained=False, nothing_trainable_reason=reason, data=built.metrics)
        return SFTStepResult(trained=True, data=built.metrics, step=self.sft_step(built.sequences, config))

    # ------------------------------------------------------------------ persistence

    def write_adapter(self, folder: Path, *, optimizer: bool = True) -> None:
        """Write the adapter (and optimizer state) into an existing folder, not atomically.

        ``trainer_state.json`` beside it holds the step count, the LoRA shape and the inputs of the
        learning-rate schedule of the last step (``lr_schedule``, ``learning_rate``,
        ``warmup_steps``, ``total_steps``), read back by :meth:`load_adapter`.

        Use :meth:`save_adapter` or :meth:`.CheckpointStore.write`, which wrap this atomically.
        """
        if self.model is None:
            raise RuntimeError("no adapter to save yet: run a train_step (or ensure_adapter) first")
        self.model.save_pretrained(str(folder))
        if optimizer and self.optimizer is not None:
            torch.save(self.optimizer.state_dict(), folder / OPTIMIZER_FILE)
        state = {"steps_done": self.steps_done, "lora": self.lora, "lr_schedule": self.schedule}
        (folder / STATE_FILE).write_text(json.dumps(state), "utf-8")

    def save_adapter(self, directory: str | os.PathLike[str], *, optimizer: bool = True) -> Path:
        """Save a PEFT adapter folder atomically (temporary folder, then rename); returns it.

        Raises:
            FileExistsError: ``directory`` exists already.
            RuntimeError: there is no adapter yet.
        """
        directory = Path(directory)
        if self.model is None:
            raise RuntimeError("no adapter to save yet: run a train_step (or ensure_adapter) first")
        with atomic_directory(directory) as tmp:
            self.write_adapter(tmp, optimizer=optimizer)
        return directory

    def load_adapter(self, directory: str | os.PathLike[str], config: TrainConfig | None = None) -> None:
        """Resume from an adapter folder written by :meth:`save_adapter` (optimizer state too, if saved).

        Raises:
            FileNotFoundError: the folder holds no ``adapter_config.json``.
        """
        directory = Path(directory)
        if not (directory / "adapter_config.json").is_file():
            raise FileNotFoundError(f"{directory} is not a PEFT adapter folder (no adapter_config.json)")
        if self.model is not None:
            self.base = self.model.unload()  # drop the current adapter, keep the base weights untouched
            self.model = None
        self.model = self._wrap_saved(directory)
        state_file = directory / STATE_FILE
        state = json.loads(state_file.read_text("utf-8")) if state_file.is_file() else {}
        self.steps_done = int(state.get("steps_done", 0))
        self.schedule = state.get("lr_schedule")
        peft_config = self.model.peft_config["default"]
        self.lora = state.get("lora") or {"r": peft_config.r, "lora_alpha": peft_config.lora_alpha}
        self._new_optimizer(config or TrainConfig())
        optimizer_file = directory / OPTIMIZER_FILE
        if optimizer_file.is_file():
            assert self.optimizer is not None
            self.optimizer.load_state_dict(
                torch.load(optimizer_file, map_location=self.device, weights_only=True)
            )
        logger.info("loaded adapter %s (step %d)", directory, self.steps_done)
