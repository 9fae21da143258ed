"""LoRA adapter training (GRPO and SFT over one update loop), shared by every trainer.

Submodules: :mod:`.trainer` (the one update loop; :mod:`.peft_trainer`, the default, and
:mod:`.unsloth_trainer` implement it), the objectives over it (:mod:`.grpo_step` with the loss in
:mod:`.grpo`; :mod:`.sft`), :mod:`.data` and :mod:`.groups` (exact-token sequences), :mod:`.checkpoints`
(atomic checkpoint folders, leased while read: :mod:`.checkpoint_leases`) and :mod:`.service` (a step on a
live server). Imports nothing of :mod:`..http` or :mod:`..serving`; the names below load on first use.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from .checkpoint_leases import CheckpointLeases
    from .checkpoints import CheckpointStore
    from .data import TrainingSequence
    from .peft_trainer import PeftTrainer
    from .service import TrainingService
    from .trainer import LoraTrainer
    from .unsloth_trainer import UnslothTrainer

__all__ = [
    "CheckpointLeases",
    "CheckpointStore",
    "LoraTrainer",
    "PeftTrainer",
    "TrainingSequence",
    "TrainingService",
    "UnslothTrainer",
]

__getattr__, __dir__ = _lazy_exports(__name__)
