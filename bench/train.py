"""Training throughput on one group with a long shared prompt: our step vs prefix sharing vs the floor.

One GRPO group: a shared prompt of ``--prompt-tokens`` tokens and ``--group`` completions of
``--completion-tokens`` tokens each, on the bundled model with a fresh LoRA (r=16, attention).
Measured in the same run, each after a warm-up, median of ``--repeats``:

- ``ours``: :meth:`PeftTrainer.train_step` with ``share_prefix=False`` (sequences right-padded
  in micro-batches of ``--micro-batch``, each row runs the whole prompt again);
- ``shared``: the same step with ``share_prefix=True`` (the default): the prompt forwarded ONCE
  per micro-batch, its KV cache repeated for the completions, backward through it;
- ``floor``: a plain PEFT forward + backward (cross-entropy on the completion tokens) over the
  same padded tokens as ``ours``, no GRPO machinery: the cost of the tokens themselves;
- ``sft``: :meth:`PeftTrainer.sft_step` on the same sequences (one epoch, one update, the prompt
  shared as in ``shared``): the same update loop with the SFT objective.

Tokens/s count every token of every sequence (G x (prompt + completion)), so the three are
comparable; the ratios are printed. Not part of the tests. Usage: ``./dev bench train``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from art_adapters_backend.bundled import resolve_model_path
from art_adapters_backend.training.data import TrainingSequence
from art_adapters_backend.training.peft_trainer import PeftTrainer

from art_adapters import SFTConfig, TrainConfig


def group(
    prompt_tokens: int, completion_tokens: int, size: int, vocab: int, seed: int
) -> list[TrainingSequence]:
    """One group: a shared prompt and ``size`` random completions, advantages +-1, on-policy."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(100, vocab, (prompt_tokens,), generator=gen).tolist()
    out = []
    for i in range(size):
        completion = torch.randint(100, vocab, (completion_tokens,), generator=gen).tolist()
        out.append(
            TrainingSequence(
                token_ids=prompt + completion,
                loss_mask=[0] * prompt_tokens + [1] * completion_tokens,
                old_logprobs=[None] * (prompt_tokens + completion_tokens),
                advantage=1.0 if i % 2 else -1.0,
                group_id="bench",
                trajectory_id=f"t{i}",
            )
        )
    return out


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--completion-tokens", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("ART_ADAPTERS_TORCH_THREADS", "0")))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    trainer = PeftTrainer(resolve_model_path("smollm2-135m-instruct"))
    config = TrainConfig(
        micro_batch_size=args.micro_batch, micro_batch_tokens=None, learning_rate=1e-6, max_grad_norm=None
    )  # rows only: the comparison is of sharing, not of the token budget
    trainer.ensure_adapter(config)
    model = trainer.model
    assert model is not None and trainer.optimizer is not None
    vocab = int(model.config.vocab_size)
    seqs = group(args.prompt_tokens, args.completion_tokens, args.group, vocab, seed=0)
    P, C, G = args.prompt_tokens, args.completion_tokens, args.group
    tokens = G * (P + C)

    plain = config.model_copy(update={"share_prefix": False})
    shared_config = config.model_copy(update={"share_prefix": True})

    def ours() -> None:
        trainer.train_step(seqs, plain)

    def shared() -> None:
        trainer.train_step(seqs, shared_config)

    sft_config = SFTConfig(
        micro_batch_size=args.micro_batch, micro_batch_tokens=None, batch_size=G, learning_rate=1e-6, max_grad_norm=None
    )

    def sft() -> None:
        trainer.sft_step(seqs, sft_config)

    ids = torch.tensor([s.token_ids for s in seqs])  # (G, P + C)
    mask = torch.tensor([s.loss_mask for s in seqs], dtype=torch.float32)  # (G, P + C)

    def floor() -> None:
        model.train()
        for start in range(0, G, args.micro_batch):
            rows = ids[start : start + args.micro_batch]
            logits = model(input_ids=rows).logits[:, :-1]  # (B, T-1, V)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1), reduction="none"
            )
            (loss * mask[start : start + args.micro_batch, 1:].reshape(-1)).sum().div(G * C).backward()
        trainer.optimizer.zero_grad(set_to_none=True)

    results = {}
    for name, fn in (("ours", ours), ("shared", shared), ("floor", floor), ("sft", sft)):
        seconds = timed(fn, args.repeats)
        results[name] = tokens / seconds
        print(f"{name:>7}: {seconds:6.2f} s/step  {results[name]:8.1f} tokens/s")
    print(
        f"group of {G} x ({P} prompt + {C} completion) tokens, micro-batch {args.micro_batch}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"ours / floor   = {results['ours'] / results['floor']:.2f}  (no sharing vs plain PEFT fwd+bwd)")
    print(f"shared / ours  = {results['shared'] / results['ours']:.2f}  (what prefix sharing gives)")
    print(f"shared / floor = {results['shared'] / results['floor']:.2f}")
    print(f"sft / shared   = {results['sft'] / results['shared']:.2f}  (the SFT objective on the same loop)")


if __name__ == "__main__":
    main()
