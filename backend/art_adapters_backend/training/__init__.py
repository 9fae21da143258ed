"""LoRA adapter training (GRPO and SFT over one update loop), shared by every trainer.

Submodules: :mod:`.trainer` (the one update loop; :mod:`.peft_trainer`, the default, and
:mod:`.unsloth_trainer` implement it), the objectives over it (:mod:`.grpo_step` with the loss in
:mod:`.grpo`; :mod:`.sft`), :mod:`.data` and :mod:`.groups` (exact-token sequences) and
:mod:`.checkpoints` (atomic checkpoint folders). Import them directly; this package imports nothing heavy.
"""

__all__: list[str] = []
