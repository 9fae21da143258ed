"""The demo's settings: :class:`DemoConfig` (the demo's own fields and the training loop it runs, a
:class:`~art_adapters.LoopConfig` from :func:`default_demo_loop`) and :data:`DEMO_LOOP_SETTINGS`, the
loop settings the ``demo`` command offers under the flag names it has always had."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from art_adapters import LoopConfig, RetentionPolicy
from art_adapters.cli_options import Setting, reject_moved

__all__ = ["DEMO_LOOP_SETTINGS", "SFT_LEARNING_RATE", "DemoConfig", "default_demo_loop"]

#: The SFT warm-up's learning rate (2 epochs over a few dozen demonstrations).
SFT_LEARNING_RATE = 5e-4

#: The demo's nested loop settings (DemoConfig fills in LoRA alpha and the seeds: see its docstring).
_DEMO_NESTED: dict[str, dict[str, Any]] = {
    # the backend decodes concurrent requests as one batch: more is faster
    "run": {"timeout_s": 600.0, "max_failure_rate": 0.25, "max_concurrency": 16},
    # lr 1e-3: greedy 100% and T=1.0 +54 to +71 points on seeds 0-2, where 5e-4 left seed 2 at +15
    # (bench/learning.py, docs/training.md "The demo's recipe")
    "train": {
        "learning_rate": 1e-3, "lora_rank": 8, "micro_batch_size": 8, "retention": RetentionPolicy(keep_latest=1),
    },
    "sft": {"learning_rate": SFT_LEARNING_RATE, "epochs": 2, "retention": RetentionPolicy(keep_latest=1)},
}


def default_demo_loop(**changes: Any) -> LoopConfig:
    """The demo's training loop: 8 steps of 3 questions x 4 rollouts, 4 samples per held-out question,
    evaluated before and after only, dynamic sampling 2, sequential; GRPO at lr 1e-3 with LoRA rank 8,
    one pass, one mini-batch, PPO, token-level normalisation, micro-batches of 8, only the latest
    checkpoint kept; the SFT warm-up (``--scripted-imitation``) at lr 5e-4 for 2 epochs; 16 rollouts
    at once, 10 minutes each, a quarter may fail.

    ``changes`` replace some of it; a dict for ``run``, ``train`` or ``sft`` changes only the settings
    it names: ``default_demo_loop(steps=2, train={"learning_rate": 5e-4})``.
    """
    settings: dict[str, Any] = {
        "steps": 8, "groups_per_step": 3, "rollouts_per_group": 4, "eval_every": 0, "eval_rollouts": 4,
        "dynamic_sampling": 2, **changes,
    }  # fmt: skip
    for name, defaults in _DEMO_NESTED.items():
        given = changes.get(name, {})
        if isinstance(given, Mapping):
            settings[name] = {**defaults, **given}
    return LoopConfig.model_validate(settings)


#: The loop field each ``demo`` loop flag sets; each flag was a DemoConfig field of that name before
#: DemoConfig held a LoopConfig.
_LOOP_FIELDS = {
    "steps": "steps", "groups": "groups_per_step", "rollouts": "rollouts_per_group", "eval_samples": "eval_rollouts",
    "learning_rate": "train.learning_rate", "lora_rank": "train.lora_rank", "passes": "train.num_iterations",
    "mini_batches": "train.mini_batches", "loss": "train.loss_type", "loss_normalization": "train.loss_normalization",
    "dynamic_sampling": "dynamic_sampling", "eval_every": "eval_every", "max_staleness": "max_staleness",
}  # fmt: skip

#: Each loop flag's help: the demo's words (its questions, its flags), not the library's.
_LOOP_HELP = {
    "steps": "Training steps, counted from the model's step when the demo starts (a rerun trains this many "
    "more): GRPO (after the --scripted-imitation SFT step, if any, which counts as one). 0: evaluate only.",
    "groups": "Training questions per step.",
    "rollouts": "Rollouts per question (the GRPO group size, >= 2).",
    "eval_samples": "Samples per held-out question.",
    "learning_rate": "LoRA learning rate.",
    "lora_rank": "LoRA rank (alpha is twice the rank).",
    "passes": "Passes over each step's rollouts (TrainConfig.num_iterations): more updates per rollout; from "
    "the second the importance ratio moves off 1 and clipping acts.",
    "mini_batches": "Optimizer updates per pass (TrainConfig.mini_batches).",
    "loss": "The policy loss (TrainConfig.loss_type): ppo, cispo or sapo.",
    "loss_normalization": "How per-token losses are averaged (TrainConfig.loss_normalization): token (DAPO: "
    "each token weighs the same) or sequence (each rollout weighs the same).",
    "dynamic_sampling": "Dynamic sampling (DAPO, LoopConfig.dynamic_sampling): a step whose groups scored "
    "alike (no GRPO signal) rolls out up to this many further batches of questions until --groups of them "
    "have a reward spread. 0: off.",
    "eval_every": "Also evaluate on the held-out questions every this many steps (0: only before and after).",
    "max_staleness": "0: sequential (roll out, score, train, repeat). k >= 1: pipelined: rollouts keep "
    "running while steps train, and a group trains only if sampled at most k steps before "
    "(LoopConfig.max_staleness).",
}

#: The loop settings ``demo`` offers, by flag: ``--groups`` sets ``loop.groups_per_step``..., with the
#: flag's help (``--loss-normalization`` offers the two normalisations that need no other setting).
DEMO_LOOP_SETTINGS: dict[str, Setting] = {
    flag: Setting(
        f"loop.{path}",
        decls=(f"--{flag.replace('_', '-')}",),
        extra={"help": _LOOP_HELP[flag]},
        annotation=Literal["token", "sequence"] if flag == "loss_normalization" else None,
    )
    for flag, path in _LOOP_FIELDS.items()
}


def _how_to_pass(path: str) -> str:
    """``loop.train.lora_rank`` -> ``loop=default_demo_loop(train={'lora_rank': ...})``."""
    _, name, *inner = path.split(".")
    return f"loop=default_demo_loop({name}={{'{inner[0]}': ...}})" if inner else f"loop=default_demo_loop({name}=...)"


#: DemoConfig settings that moved into ``DemoConfig.loop``, and how to pass them now.
_MOVED = {flag: _how_to_pass(setting.path) for flag, setting in DEMO_LOOP_SETTINGS.items()}


class DemoConfig(BaseModel):
    """Settings of the demo; each field but :attr:`loop` is a ``demo`` flag of the same name (its help is
    the description), and :data:`DEMO_LOOP_SETTINGS` are the flags of the loop's settings.

    :attr:`loop` is the training loop (default :func:`default_demo_loop`). Its ``steps`` counts steps
    from the model's step when the demo starts (``run_demo`` trains up to that step plus ``steps``), so a
    second run in the same ``run_dir`` trains the same model that many steps further. Unless the loop
    sets them itself: ``loop.run_dir`` is :attr:`run_dir`, ``loop.seed`` and the GRPO and SFT steps'
    seeds are :attr:`seed`, LoRA alpha is twice the rank, and the SFT step's LoRA shape is GRPO's.
    """

    model_config = ConfigDict(extra="forbid")

    run_dir: Path = Field(
        default=Path(".art/demo"),
        description="Backend data, metrics.jsonl and plots/; a rerun continues training.",
    )
    eval_size: PositiveInt = Field(
        default=12, description="Held-out questions evaluated before and after training (never trained on)."
    )
    train_size: PositiveInt = Field(default=32, description="Training questions (cycled through).")
    temperature: float = Field(
        default=1.0, gt=0.0, le=2.0, description="Sampling temperature of training rollouts."
    )
    eval_temperature: float = Field(
        default=1.0,
        ge=0.0,
        le=2.0,
        description="Sampling temperature of the held-out evaluation; the greedy agent is evaluated too "
        "(0: greedy only). The greedy base model makes the right add call on ~90% of the questions but "
        "states the right answer on ~8%.",
    )
    max_tokens: PositiveInt = Field(default=48, description="Most tokens per model turn.")
    scripted_imitation: NonNegativeInt = Field(
        default=0,
        description="Not RL, off by default: before GRPO, one SFT step on this many runs of a hand-written "
        "scripted policy (a regex reads the numbers, calls add, states the result) on training questions "
        "(imitation of a script, written to run_dir/scripted-imitation.jsonl); it counts as one of --steps. "
        "0: GRPO from the base model alone.",
    )
    seed: int = Field(default=0, description="Seed of the questions, the split and training.")
    threads: PositiveInt | None = Field(
        default=None,
        description="Torch threads of the embedded backend (sets $ART_ADAPTERS_TORCH_THREADS; "
        "default: the environment's, else all cores).",
    )
    no_judge: bool = Field(
        default=False, description="Score with the verifiable check even if a judge is configured."
    )
    question: str = Field(
        default="What is 345 + 278?", description="Asked at the end through the trained model."
    )
    loop: LoopConfig = Field(default_factory=default_demo_loop, description="The training loop's settings.")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """``sft_warmup`` (deprecated) is ``scripted_imitation``: it never was distillation; the loop's
        settings moved into :attr:`loop`."""
        if isinstance(data, dict) and "sft_warmup" in data:
            warnings.warn(
                "DemoConfig.sft_warmup is deprecated: use scripted_imitation (SFT on a scripted policy's runs)",
                DeprecationWarning,
                stacklevel=2,
            )
            data = {**data}
            data.setdefault("scripted_imitation", data.pop("sft_warmup"))
        return reject_moved(data, _MOVED, "DemoConfig.loop")

    @model_validator(mode="after")
    def _loop_follows(self) -> DemoConfig:
        loop, train = self.loop, self.loop.train
        own = {"seed": self.seed} if "seed" not in train.model_fields_set else {}
        if "lora_alpha" not in train.model_fields_set:
            own["lora_alpha"] = 2.0 * train.lora_rank
        train = train.model_copy(update=own)
        shape = {"seed": self.seed, "lora_rank": train.lora_rank, "lora_alpha": train.lora_alpha}
        sft = loop.sft.model_copy(update={k: v for k, v in shape.items() if k not in loop.sft.model_fields_set})
        unset = {name: value for name, value in {"run_dir": self.run_dir, "seed": self.seed}.items()
                 if name not in loop.model_fields_set}  # fmt: skip
        self.loop = loop.model_copy(update={**unset, "train": train, "sft": sft})
        return self
