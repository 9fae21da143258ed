"""GRPO training of LoRA adapters, shared by every trainer.

Submodules: :mod:`.grpo` (the loss), :mod:`.data` (groups -> exact-token sequences), :mod:`.trainer`
(the shared step; :mod:`.peft_trainer`, the default, and :mod:`.unsloth_trainer` implement it) and
:mod:`.checkpoints` (atomic checkpoint folders). Import them directly; this package imports nothing
heavy by itself.
"""

__all__: list[str] = []
