"""GRPO training of LoRA adapters, shared by every trainer.

- :mod:`.grpo`: the loss as small pure torch functions (advantages, ratios, clipping, KL,
  length normalisation) with the variants in registries.
- :mod:`.data`: trajectory groups -> exact-token training sequences, with drop metrics.
- :mod:`.trainer`: the trainer interface and the shared GRPO step; :mod:`.peft_trainer`
  (transformers + PEFT, the default) and :mod:`.unsloth_trainer` implement it.
- :mod:`.checkpoints`: atomic checkpoint folders, listing, retention, cleanup.

Import the submodules directly; this package imports nothing heavy by itself.
"""

__all__: list[str] = []
