"""The trainer interface and the GRPO step every LoRA trainer shares.

:class:`LoraTrainer` writes the step, saving and loading once; a subclass only says how the base model
is loaded and the LoRA attached (:mod:`.peft_trainer`, :mod:`.unsloth_trainer`).
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
from pydantic import BaseModel, Field

from art_adapters import TrainConfig
from art_adapters.files import atomic_directory

from ..threads import set_torch_threads
from .cancel import TrainingCancelledError
from .data import (
    BuildMetrics,
    NothingTrainableError,
    RecordLookup,
    Renderer,
    TrainingSequence,
    build_sequences,
)
from .grpo import (
    BatchTotals,
    LossSettings,
    grpo_loss,
    kept_token_logprobs,
    logits_keep_mask,
    token_logprobs,
)

if TYPE_CHECKING:
    from peft import PeftModel

    from art_adapters import SFTConfig, Trajectory, TrajectoryGroup

    from .sft import SFTStepResult

__all__ = ["GroupsStepResult", "LoraTrainer", "PassMetrics", "StepMetrics"]

logger = logging.getLogger(__name__)

OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "trainer_state.json"


class PassMetrics(BaseModel):
    """One pass over the step's sequences (:attr:`~art_adapters.TrainConfig.num_iterations`).

    Attributes:
        loss: mean of the pass's update losses (each as optimised, normalised over its mini-batch).
        clip_low_fraction / clip_high_fraction: the pass's loss tokens clipped on each side,
            measured just before each update (see :class:`.grpo.LossOutput`).
        ratio_mean: mean importance ratio over the pass's loss tokens (1.0 when on-policy;
            moves off 1 from the second update on).
        policy_shift: mean over the pass's loss tokens of advantage x log-ratio, each measured
            just before its update: from the second pass on, positive when the earlier updates
            moved probability toward the tokens with positive advantage and away from those with
            negative, as GRPO should (about 0 in the first pass, which is on-policy).
    """

    loss: float
    clip_low_fraction: float
    clip_high_fraction: float
    ratio_mean: float
    policy_shift: float


class StepMetrics(BaseModel):
    """What one :meth:`LoraTrainer.train_step` did (one step: one checkpoint, ``updates`` updates).

    The loss, KL, clip and ratio values are means over all the step's updates (token-weighted for
    the per-token ones), so with one update (the default) they are that update's.

    Attributes:
        loss: the loss (policy loss + beta x KL) as optimised, mean over the updates.
        policy_loss: the surrogate part alone, mean over the updates.
        kl: mean per-token KL to the reference (adapter disabled); ``None`` when ``beta == 0``.
        grad_norm: global L2 norm of the LoRA gradient before clipping, mean over the updates.
        clip_fraction: loss tokens whose ratio was clipped where it mattered (both sides).
        clip_low_fraction / clip_high_fraction: the two sides of ``clip_fraction``.
        ratio_mean: mean importance ratio over loss tokens (1.0 when fully on-policy).
        sequences: sequences trained on; micro_batches: forward/backward passes of one pass.
        tokens: loss tokens; sequence_tokens: all tokens of the sequences (prompt, context,
            completions).
        padded_tokens: tokens fed in one pass, right-padding included (a shared prefix counts once).
        seconds: wall-clock time of the step.
        learning_rate: the step size used (the step's value of ``lr_schedule``).
        step: training steps done by this trainer's adapter so far, including this one (the
            model's step number when the trainer holds the model's latest checkpoint).
        updates: optimizer updates made: ``num_iterations`` x mini-batches with loss tokens.
        passes: per pass (``num_iterations`` of them, in order): loss, clip fractions, ratio.
    """

    loss: float
    policy_loss: float
    kl: float | None
    grad_norm: float
    clip_fraction: float
    clip_low_fraction: float
    clip_high_fraction: float
    ratio_mean: float
    sequences: int
    micro_batches: int
    tokens: int
    sequence_tokens: int
    padded_tokens: int
    seconds: float
    learning_rate: float
    step: int
    updates: int = 1
    passes: list[PassMetrics] = Field(default_factory=list)

    def scalars(self) -> dict[str, Any]:
        """The metrics as flat scalars, as the train API reports them: every field but ``step``
        and ``passes``, and per pass ``p`` (from 1) ``pass_<p>_loss``, ``pass_<p>_clip_low_fraction``,
        ``pass_<p>_clip_high_fraction``, ``pass_<p>_ratio_mean`` and ``pass_<p>_policy_shift``."""
        out = self.model_dump(exclude={"step", "passes"})
        for number, one in enumerate(self.passes, start=1):
            out.update({f"pass_{number}_{key}": value for key, value in one.model_dump().items()})
        return out


class GroupsStepResult(BaseModel):
    """The outcome of :meth:`LoraTrainer.train_groups`: what the data gave and what the step did.

    Attributes:
        trained: whether an optimizer update happened.
        nothing_trainable_reason: why not, when ``trained`` is False (never silent).
        data: how the sequences were built (groups used and dropped and why, fallback turns, ...).
        step: the step's metrics, ``None`` when nothing was trainable.
    """

    trained: bool
    nothing_trainable_reason: str | None = None
    data: BuildMetrics
    step: StepMetrics | None = None


#: The least number of shared leading tokens worth forwarding once per micro-batch.
MIN_SHARED_PREFIX = 32


def shared_prefix_length(sequences: Sequence[TrainingSequence]) -> int:
    """Leading tokens all ``sequences`` share and none carries loss on, leaving each row >= 1 token."""
    first = sequences[0].token_ids
    n = min(len(s.token_ids) for s in sequences) - 1
    for seq in sequences:
        n = min(n, seq.loss_mask.index(1) if 1 in seq.loss_mask else n)
        i = 0
        while i < n and seq.token_ids[i] == first[i]:
            i += 1
        n = i
    return max(n, 0)


def _token_advantages(seq: TrainingSequence) -> list[float] | None:
    """The sequence's per-token advantages (per-turn credit), or ``None`` when it has one advantage."""
    return seq.token_advantages


def _suffix(seq: TrainingSequence, start: int) -> TrainingSequence:
    update: dict[str, Any] = {
        "token_ids": seq.token_ids[start:],
        "loss_mask": seq.loss_mask[start:],
        "old_logprobs": seq.old_logprobs[start:],
    }
    per_token = _token_advantages(seq)
    if per_token is not None:
        update["token_advantages"] = per_token[start:]
    return seq.model_copy(update=update)


class _Batch:
    """Right-padded tensors of one micro-batch.

    With ``prefix_len`` L > 0 the rows share their first L tokens: ``prefix_ids`` (1, L) holds
    them once, and ``input_ids``, ``loss_mask``, ``old_logprobs`` hold only the rest (B, T - L);
    ``attention_mask`` covers prefix and rest (B, T). ``advantages`` is (B,), or (B, T - L) when a
    sequence carries per-token advantages (per-turn credit).
    """

    def __init__(
        self, sequences: Sequence[TrainingSequence], pad_id: int, device: torch.device, prefix_len: int = 0
    ) -> None:
        self.prefix_len = prefix_len
        self.prefix_ids = torch.tensor([sequences[0].token_ids[:prefix_len]], dtype=torch.long).to(
            device
        )  # (1, L)
        if prefix_len:
            sequences = [_suffix(s, prefix_len) for s in sequences]
        width = max(len(s.token_ids) for s in sequences)
        n = len(sequences)
        self.input_ids = torch.full((n, width), pad_id, dtype=torch.long)  # (B, T)
        self.attention_mask = torch.zeros((n, width), dtype=torch.long)  # (B, T)
        self.loss_mask = torch.zeros((n, width), dtype=torch.float32)  # (B, T)
        self.old_logprobs = torch.full((n, width), float("nan"), dtype=torch.float32)  # (B, T), NaN = unknown
        for row, seq in enumerate(sequences):
            length = len(seq.token_ids)
            self.input_ids[row, :length] = torch.tensor(seq.token_ids, dtype=torch.long)
            self.attention_mask[row, :length] = 1
            self.loss_mask[row, :length] = torch.tensor(seq.loss_mask, dtype=torch.float32)
            self.old_logprobs[row, :length] = torch.tensor(
                [math.nan if x is None else x for x in seq.old_logprobs], dtype=torch.float32
            )
        if prefix_len:  # the shared prefix is attended by every row
            self.attention_mask = torch.cat(
                [torch.ones((n, prefix_len), dtype=torch.long), self.attention_mask], dim=1
            )  # (B, L + T')
        self.advantages = torch.tensor([s.advantage for s in sequences], dtype=torch.float32)  # (B,)
        if any(_token_advantages(s) is not None for s in sequences):  # per-turn credit: (B, T)
            per_token = self.advantages.reshape(-1, 1).repeat(1, width)  # rows without: their one value
            for row, seq in enumerate(sequences):
                values = _token_advantages(seq)
                if values is not None:
                    per_token[row, : len(values)] = torch.tensor(values, dtype=torch.float32)
            self.advantages = per_token  # (B, T)
        self.temperatures = torch.tensor([s.temperature for s in sequences], dtype=torch.float32)  # (B,)
        for name in (
            "input_ids",
            "attention_mask",
            "loss_mask",
            "old_logprobs",
            "advantages",
            "temperatures",
        ):
            setattr(self, name, getattr(self, name).to(device))


def _check_sequences(sequences: Sequence[TrainingSequence]) -> None:
    for i, seq in enumerate(sequences):
        n = len(seq.token_ids)
        if n == 0 or len(seq.loss_mask) != n or len(seq.old_logprobs) != n:
            raise ValueError(
                f"sequence {i} (trajectory {seq.trajectory_id}): token_ids, loss_mask and old_logprobs must have the "
                f"same non-zero length, got {n}, {len(seq.loss_mask)}, {len(seq.old_logprobs)}"
            )
        if seq.loss_mask[0]:
            raise ValueError(
                f"sequence {i}: the first token has no context and cannot carry loss (loss_mask[0] = 1)"
            )
        if not math.isfinite(seq.advantage):
            raise ValueError(f"sequence {i}: advantage is {seq.advantage}; it must be finite")


def split_mini_batches(
    sequences: Sequence[TrainingSequence], count: int
) -> list[list[TrainingSequence]]:
    """Cut ``sequences`` in their order into ``min(count, len(sequences))`` contiguous mini-batches
    whose sizes differ by at most one (larger ones first); logs when ``count`` is cut down."""
    if count > len(sequences):
        logger.warning(
            "mini_batches=%d but the step has only %d sequences: %d mini-batches of one sequence",
            count, len(sequences), len(sequences),
        )  # fmt: skip
    count = max(1, min(count, len(sequences)))
    size, extra = divmod(len(sequences), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(list(sequences[start:end]))
        start = end
    return out


class _UpdateSums:
    """Sums of one optimizer update's micro-batches (see :class:`.grpo.LossOutput`)."""

    def __init__(self) -> None:
        self.loss = self.policy = self.kl = self.ratio = self.shift = self.grad_norm = 0.0
        self.low = self.high = 0

    def add(self, out: Any) -> None:
        """Add one micro-batch's :class:`.grpo.LossOutput`."""
        self.loss += float(out.loss.detach())
        self.policy += out.policy_loss
        self.kl += out.kl_sum
        self.ratio += out.ratio_sum
        self.shift += out.shift_sum
        self.low += out.clipped_low
        self.high += out.clipped_high


def _pass_metrics(updates: Sequence[_UpdateSums], tokens: int) -> PassMetrics:
    return PassMetrics(
        loss=sum(u.loss for u in updates) / len(updates),
        clip_low_fraction=sum(u.low for u in updates) / tokens,
        clip_high_fraction=sum(u.high for u in updates) / tokens,
        ratio_mean=sum(u.ratio for u in updates) / tokens,
        policy_shift=sum(u.shift for u in updates) / tokens,
    )


def _schedule_inputs(config: TrainConfig) -> dict[str, Any]:
    """What the learning rate of a step follows from, besides the step number (saved with the adapter)."""
    return config.model_dump(include={"lr_schedule", "learning_rate", "warmup_steps", "total_steps"})


class LoraTrainer(ABC):
    """A LoRA trainer: one base model, one adapter, one optimizer; the GRPO step shared by all.

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

    def _micro_batches(
        self, sequences: Sequence[TrainingSequence], size: int, share_prefix: bool = False
    ) -> list[_Batch]:
        if not share_prefix:
            ordered = sorted(sequences, key=lambda s: len(s.token_ids), reverse=True)
            return [
                _Batch(ordered[i : i + size], self.pad_token_id, self.device)
                for i in range(0, len(ordered), size)
            ]
        by_group: dict[str, list[TrainingSequence]] = {}
        for seq in sequences:
            by_group.setdefault(seq.group_id, []).append(seq)
        batches = []
        for members in by_group.values():
            ordered = sorted(members, key=lambda s: len(s.token_ids), reverse=True)
            for i in range(0, len(ordered), size):
                chunk = ordered[i : i + size]
                shared = shared_prefix_length(chunk) if len(chunk) > 1 else 0
                prefix = shared if shared >= MIN_SHARED_PREFIX else 0
                batches.append(_Batch(chunk, self.pad_token_id, self.device, prefix))
        return batches

    #: Whether the model accepts a boolean (B, T) ``logits_to_keep`` (transformers 5), so the LM
    #: head runs only before loss tokens: (N, V) logits instead of (B, T, V), a memory saving for
    #: long prompts and large vocabularies (no measurable speed change for the bundled model on CPU).
    select_logits: bool = False

    def _logprobs(self, batch: _Batch, *, loss_only: bool = False) -> torch.Tensor:
        """(B, T) log-probs of the batch's tokens; with ``loss_only`` only before-loss positions are exact."""
        assert self.model is not None
        temperature: torch.Tensor | float = batch.temperatures
        if bool((batch.temperatures == 1.0).all()):
            temperature = 1.0
        if batch.prefix_len:
            return self._shared_prefix_logprobs(batch, temperature)
        if loss_only and self.select_logits:
            keep = logits_keep_mask(batch.loss_mask)  # (B, T)
            logits = self.model(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask, logits_to_keep=keep
            ).logits  # (N, V)
            return kept_token_logprobs(logits, batch.input_ids, keep, temperature)
        logits = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        return token_logprobs(logits, batch.input_ids, temperature)  # (B, T)

    def _shared_prefix_logprobs(self, batch: _Batch, temperature: torch.Tensor | float) -> torch.Tensor:
        """(B, T') log-probs of the rows' own tokens, the shared prefix forwarded once (with grad)."""
        assert self.model is not None
        rows = batch.input_ids.shape[0]
        out = self.model(input_ids=batch.prefix_ids, use_cache=True)  # (1, L) once
        cache = out.past_key_values
        cache.batch_repeat_interleave(rows)  # (B, ...) views of the same keys/values: grads accumulate
        rest = self.model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            past_key_values=cache,
            use_cache=False,
        ).logits  # (B, T', V)
        first = out.logits[:, -1:, :].expand(rows, -1, -1)  # (B, 1, V): predicts each row's first own token
        last_prefix = batch.prefix_ids[:, -1:].expand(rows, -1)  # (B, 1)
        logits = torch.cat([first, rest], dim=1)  # (B, T' + 1, V)
        ids = torch.cat([last_prefix, batch.input_ids], dim=1)  # (B, T' + 1)
        return token_logprobs(logits, ids, temperature)[:, 1:]  # (B, T')

    @torch.no_grad()
    def score(
        self, sequences: Sequence[TrainingSequence], config: TrainConfig | None = None
    ) -> list[list[float]]:
        """Log-probs of every token under the current policy (position 0 is 0.0), no gradient.

        Creates the adapter (from ``config`` or defaults) when none exists yet.
        """
        _check_sequences(sequences)
        self.ensure_adapter(config or TrainConfig())
        assert self.model is not None
        self.model.eval()
        out: dict[int, list[float]] = {}
        size = (config or TrainConfig()).micro_batch_size
        for start in range(0, len(sequences), size):
            chunk = list(sequences[start : start + size])
            batch = _Batch(chunk, self.pad_token_id, self.device)
            lp = self._logprobs(batch).cpu()
            for row, seq in enumerate(chunk):
                out[start + row] = lp[row, : len(seq.token_ids)].tolist()
        return [out[i] for i in range(len(sequences))]

    def train_step(self, sequences: Sequence[TrainingSequence], config: TrainConfig) -> StepMetrics:
        """One GRPO training step over ``sequences``: ``num_iterations`` passes, each of
        ``mini_batches`` optimizer updates (one update by default).

        The sequences are cut into mini-batches (:func:`split_mini_batches`), each sorted by
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
        if not sequences:
            raise NothingTrainableError("nothing trainable: the step received no sequences")
        _check_sequences(sequences)
        total_tokens = sum(s.loss_tokens for s in sequences)
        if total_tokens == 0:
            raise NothingTrainableError(
                f"nothing trainable: none of the {len(sequences)} sequences has a loss token"
            )
        started = time.perf_counter()
        learning_rate = config.learning_rate_at(self.steps_done)
        self.check_cancelled()
        self.ensure_adapter(config)
        self.check_cancelled()
        assert self.model is not None and self.optimizer is not None
        self._note_schedule(config)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
            group["weight_decay"] = config.weight_decay
        if config.seed is not None:
            torch.manual_seed(config.seed + self.steps_done)
        settings = LossSettings.from_config(config)
        layout = []  # (micro-batches, totals) per mini-batch that has loss tokens
        for mini in split_mini_batches(sequences, config.mini_batches):
            tokens = sum(s.loss_tokens for s in mini)
            if tokens:
                batches = self._micro_batches(mini, config.micro_batch_size, config.share_prefix)
                layout.append((batches, BatchTotals(len(mini), tokens, config.max_tokens)))
        updates = config.num_iterations * len(layout)
        snapshot = None
        if updates > 1:  # later updates see moved weights: score the unknown old log-probs first
            self._score_unknown_old_logprobs([b for batches, _ in layout for b in batches])
            snapshot = self._snapshot()
        self.model.train()
        refs: dict[int, torch.Tensor] = {}  # the reference's log-probs per micro-batch, for every pass
        done: list[_UpdateSums] = []
        passes = []
        try:
            for _ in range(config.num_iterations):
                first = len(done)
                for batches, totals in layout:
                    where = f" at update {len(done) + 1} of {updates}" if updates > 1 else ""
                    done.append(self._update(batches, totals, settings, config, refs, where))
                passes.append(_pass_metrics(done[first:], total_tokens))
        except FloatingPointError:
            if snapshot is not None:
                self._restore(snapshot)
            raise
        self.steps_done += 1
        seen = total_tokens * config.num_iterations  # loss tokens over all passes
        return StepMetrics(
            loss=sum(u.loss for u in done) / len(done),
            policy_loss=sum(u.policy for u in done) / len(done),
            kl=sum(u.kl for u in done) / seen if settings.beta != 0.0 else None,
            grad_norm=sum(u.grad_norm for u in done) / len(done),
            clip_fraction=sum(u.low + u.high for u in done) / seen,
            clip_low_fraction=sum(u.low for u in done) / seen,
            clip_high_fraction=sum(u.high for u in done) / seen,
            ratio_mean=sum(u.ratio for u in done) / seen,
            sequences=len(sequences),
            micro_batches=sum(len(batches) for batches, _ in layout),
            tokens=total_tokens,
            sequence_tokens=sum(len(s.token_ids) for s in sequences),
            padded_tokens=sum(b.input_ids.numel() + b.prefix_len for batches, _ in layout for b in batches),
            seconds=time.perf_counter() - started,
            learning_rate=learning_rate,
            step=self.steps_done,
            updates=len(done),
            passes=passes,
        )

    def _update(
        self,
        batches: list[_Batch],
        totals: BatchTotals,
        settings: LossSettings,
        config: TrainConfig,
        refs: dict[int, torch.Tensor],
        where: str = "",
    ) -> _UpdateSums:
        """One optimizer update over one mini-batch's micro-batches (``where`` names it in errors)."""
        assert self.model is not None and self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=True)
        sums = _UpdateSums()
        for batch in batches:
            self.check_cancelled()
            ref = None
            if settings.beta != 0.0:
                ref = refs.get(id(batch))
                if ref is None:
                    with torch.no_grad(), self.model.disable_adapter():
                        ref = refs[id(batch)] = self._logprobs(batch, loss_only=True)
            out = grpo_loss(
                self._logprobs(batch, loss_only=True),
                batch.old_logprobs,
                batch.advantages,
                batch.loss_mask,
                settings,
                totals,
                ref,
            )
            out.loss.backward()
            sums.add(out)
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        max_norm = config.max_grad_norm if config.max_grad_norm is not None else float("inf")
        sums.grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        if not (math.isfinite(sums.loss) and math.isfinite(sums.grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(
                f"non-finite step{where} (loss {sums.loss}, grad norm {sums.grad_norm}); weights unchanged: "
                "lower learning_rate, set max_grad_norm, or check the sequences' old log-probs"
            )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sums

    @torch.no_grad()
    def _score_unknown_old_logprobs(self, batches: Sequence[_Batch]) -> None:
        """Fill unknown (NaN) old log-probs on loss tokens with the current weights' (eval mode)."""
        assert self.model is not None
        self.model.eval()
        for batch in batches:
            self.check_cancelled()
            unknown = torch.isnan(batch.old_logprobs) & (batch.loss_mask > 0)
            if bool(unknown.any()):
                current = self._logprobs(batch, loss_only=True).to(batch.old_logprobs.dtype)
                batch.old_logprobs = torch.where(unknown, current, batch.old_logprobs)

    def _snapshot(self) -> tuple[list[torch.Tensor], dict[str, Any]]:
        """A copy of the trainable weights and the optimizer state (LoRA-sized), to undo a failed step."""
        assert self.model is not None and self.optimizer is not None
        weights = [p.detach().clone() for p in self.model.parameters() if p.requires_grad]
        return weights, copy.deepcopy(self.optimizer.state_dict())

    def _restore(self, snapshot: tuple[list[torch.Tensor], dict[str, Any]]) -> None:
        assert self.model is not None and self.optimizer is not None
        weights, state = snapshot
        with torch.no_grad():
            for param, saved in zip(
                [p for p in self.model.parameters() if p.requires_grad], weights, strict=True
            ):
                param.copy_(saved)
        self.optimizer.load_state_dict(state)

    def _note_schedule(self, config: TrainConfig) -> None:
        """Remember the schedule's inputs (saved with the adapter); warn when a step changes them."""
        inputs = _schedule_inputs(config)
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
        """Build sequences from scored groups (:func:`.data.build_sequences`) and train one step.

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
        """One SFT step on the trajectories' assistant turns, on this adapter (see :mod:`.sft`)."""
        from .sft import train_sft

        return train_sft(self, trajectories, get_record, render, config)

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
