"""Training throughput on one group with a long shared prompt: our step vs prefix sharing vs the floor.

One GRPO group: a shared prompt of ``--prompt-tokens`` tokens and ``--group`` completions of
``--completion-tokens`` tokens each, on the bundled model with a fresh LoRA (r=16, attention).
Measured in the same run, each after a warm-up, median of ``--repeats``:

- ``ours``: :meth:`PeftTrainer.train_step` (full GRPO step: sequences right-padded in
  micro-batches of ``--micro-batch``, each row runs the whole prompt again);
- ``shared``: the prompt forwarded ONCE, its KV cache repeated for the G completions, which are
  forwarded on top of it, the same clipped GRPO loss on the completion tokens, backward through
  the shared prompt (what prefix sharing would give; our trainer does not do this yet);
- ``floor``: a plain PEFT forward + backward (cross-entropy on the completion tokens) over the
  same padded tokens as ``ours``, no GRPO machinery: the cost of the tokens themselves.

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
from art_adapters_backend.training.grpo import BatchTotals, LossSettings, grpo_loss
from art_adapters_backend.training.peft_trainer import PeftTrainer

from art_adapters import TrainConfig


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
    config = TrainConfig(micro_batch_size=args.micro_batch, learning_rate=1e-6, max_grad_norm=None)
    trainer.ensure_adapter(config)
    model = trainer.model
    assert model is not None and trainer.optimizer is not None
    vocab = int(model.config.vocab_size)
    seqs = group(args.prompt_tokens, args.completion_tokens, args.group, vocab, seed=0)
    P, C, G = args.prompt_tokens, args.completion_tokens, args.group
    tokens = G * (P + C)

    def ours() -> None:
        trainer.train_step(seqs, config)

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

    settings = LossSettings.from_config(config)
    totals = BatchTotals(sequences=G, tokens=G * C, max_tokens=None)
    advantages = torch.tensor([s.advantage for s in seqs])
    completions = ids[:, P:]  # (G, C)

    def shared() -> None:
        model.train()
        out = model(input_ids=ids[:1, :P], use_cache=True)  # the prompt, once
        cache = out.past_key_values
        cache.batch_repeat_interleave(G)
        last = out.logits[:, -1:].expand(G, -1, -1)  # predicts each completion's first token
        logits = model(input_ids=completions, past_key_values=cache, use_cache=False).logits  # (G, C, V)
        full = torch.cat([last, logits[:, :-1]], dim=1)  # (G, C, V): predictions of the C tokens
        lp = torch.gather(torch.log_softmax(full, -1), 2, completions.unsqueeze(-1)).squeeze(-1)  # (G, C)
        del full
        result = grpo_loss(
            lp, torch.full_like(lp, float("nan")), advantages, torch.ones_like(lp), settings, totals
        )
        result.loss.backward()
        trainer.optimizer.zero_grad(set_to_none=True)

    with torch.no_grad():  # prefix sharing must score the completions exactly like the full forward
        model.eval()
        out = model(input_ids=ids[:1, :P], use_cache=True)
        cache = out.past_key_values
        cache.batch_repeat_interleave(G)
        logits = model(input_ids=completions, past_key_values=cache, use_cache=False).logits
        full = torch.cat([out.logits[:, -1:].expand(G, -1, -1), logits[:, :-1]], dim=1)
        shared_lp = torch.gather(torch.log_softmax(full, -1), 2, completions.unsqueeze(-1)).squeeze(-1)
        reference = torch.tensor(trainer.score(seqs, config))[:, P:]
        print(f"shared-prefix vs full-sequence log-probs: max |diff| = {(shared_lp - reference).abs().max():.2e}")

    results = {}
    for name, fn in (("ours", ours), ("shared", shared), ("floor", floor)):
        seconds = timed(fn, args.repeats)
        results[name] = tokens / seconds
        print(f"{name:>7}: {seconds:6.2f} s/step  {results[name]:8.1f} tokens/s")
    print(
        f"group of {G} x ({P} prompt + {C} completion) tokens, micro-batch {args.micro_batch}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"ours / floor   = {results['ours'] / results['floor']:.2f}  (1.0 = no overhead over plain PEFT)")
    print(f"shared / ours  = {results['shared'] / results['ours']:.2f}  (speed-up prefix sharing would give)")
    print(f"shared / floor = {results['shared'] / results['floor']:.2f}")


if __name__ == "__main__":
    main()
