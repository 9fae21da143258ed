"""Peak memory and time of one GRPO step: micro-batches cut by rows only vs by a token budget.

The shape of a notes-server step (issue 25's MCP-RL): ``--sequences`` sequences of about
``--length`` tokens (a long prompt, ``--own`` loss tokens), ``--micro-batch`` rows a micro-batch,
without prefix sharing (a multi-turn trajectory trains as several sequences whose prompts differ).
Each setting runs in its own process (so its peak is its own): the step's peak resident memory over
the process's memory once the model is loaded, and the step's seconds, then the ratios against
``micro_batch_tokens=None`` (rows only, the behaviour before the budget) measured in the same run.

Not part of the tests. Usage: ``./dev bench train_memory [--budgets none,2048,1024]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

CHILD = "--child"


def _step(budget: int | None, args: argparse.Namespace) -> dict[str, float]:
    """One step in this process: {"peak_gb": ..., "seconds": ..., "micro_batches": ...}."""
    import torch
    from art_adapters_backend.bundled import resolve_model_path
    from art_adapters_backend.training.data import TrainingSequence
    from art_adapters_backend.training.peft_trainer import PeftTrainer

    from art_adapters import TrainConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    config = TrainConfig(
        micro_batch_size=args.micro_batch, micro_batch_tokens=budget, share_prefix=False, learning_rate=1e-5
    )
    trainer = PeftTrainer(resolve_model_path("smollm2-135m-instruct"))
    trainer.ensure_adapter(config)
    gen = torch.Generator().manual_seed(0)
    seqs = []
    for i in range(args.sequences):
        length = args.length + int(torch.randint(-100, 100, (1,), generator=gen))
        ids = torch.randint(100, 40000, (length,), generator=gen).tolist()
        mask = [0] * (length - args.own) + [1] * args.own
        seqs.append(TrainingSequence(token_ids=ids, loss_mask=mask, old_logprobs=[None] * length,
                                     advantage=1.0 if i % 2 else -1.0, group_id=f"g{i % 2}",
                                     trajectory_id=f"t{i}"))  # fmt: skip
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    metrics = trainer.train_step(seqs, config)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_gb": (peak - loaded) / 1e6, "seconds": seconds, "micro_batches": metrics.micro_batches}


def main() -> None:
    """Run each budget in a child process and print the table and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", default="none,2048,1024", help="comma-separated; 'none' is rows only")
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--length", type=int, default=800, help="mean sequence length, tokens")
    parser.add_argument("--own", type=int, default=60, help="loss tokens at the end of each sequence")
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("ART_ADAPTERS_TORCH_THREADS", "0")))
    parser.add_argument(CHILD, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        budget = None if args.child == "none" else int(args.child)
        print(json.dumps(_step(budget, args)))
        return
    rows: dict[str, dict[str, float]] = {}
    for name in args.budgets.split(","):
        argv = [sys.executable, __file__, CHILD, name, "--sequences", str(args.sequences), "--length",
                str(args.length), "--own", str(args.own), "--micro-batch", str(args.micro_batch),
                "--threads", str(args.threads)]  # fmt: skip
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        rows[name] = json.loads(out)
        r = rows[name]
        print(f"micro_batch_tokens={name:>5}: {r['micro_batches']:3.0f} micro-batches, "
              f"peak +{r['peak_gb']:.2f} GB, {r['seconds']:.1f} s", flush=True)  # fmt: skip
    base = rows.get("none")
    if base:
        for name, r in rows.items():
            if name != "none":
                print(f"{name} / rows only: memory {r['peak_gb'] / base['peak_gb']:.2f}x, "
                      f"time {r['seconds'] / base['seconds']:.2f}x")  # fmt: skip
    print(f"{args.sequences} sequences of ~{args.length} tokens, {args.micro_batch} rows a micro-batch")


if __name__ == "__main__":
    main()
