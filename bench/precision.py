"""bf16 against fp32 on this CPU: the engine's decode step, a prefill, and the logprob mismatch.

Issue 22 asks for lower precision only where it is measured to help, and only with the sampler's
logprobs checked against the trainer's fp32 ones on the same tokens. For each ``--shapes`` entry
(``rows x context tokens``) this times one decode step of the bundled model in fp32 and in bf16
(the engine's growing KV cache, ``--steps`` steps after two warm-up steps, the two dtypes
alternated per shape so load drifts hit both), then a ``--prefill`` prompt, and prints
bf16/fp32 time ratios measured in the same run. Then it samples ``--samples`` completions in fp32
and scores every sampled token under both dtypes: the mean and largest ``|logprob_bf16 -
logprob_fp32|`` and the range of the importance ratio ``exp(bf16 - fp32)`` a trainer would have to
correct for. Whether the CPU reports ``avx512_bf16`` is printed first (without it, bf16 matmuls are
emulated). Not part of the tests. Usage::

    ./dev bench precision [--threads 2] [--shapes 1x50,12x1000,32x300,32x1000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from art_adapters_backend.bundled import BUNDLED_MODEL, resolve_model_path
from art_adapters_backend.serving.engine.kv_cache import growing_cache
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = (
    "Explain in a few sentences why the sky is blue.",
    "Write a short story about a robot learning to paint.",
    "List five uses of a paperclip and say why each works.",
    "What is 345 + 278? Show your working step by step.",
)


def cpu_flags() -> set[str]:
    """The CPU feature flags Linux reports (empty elsewhere)."""
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return set()
    for line in path.read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def decode_seconds(model: torch.nn.Module, rows: int, context: int, steps: int) -> float:
    """Mean seconds of one decode step for ``rows`` rows of ``context`` cached tokens."""
    layers = model.config.num_hidden_layers
    with torch.inference_mode():
        cache = growing_cache(None, layers)
        model(
            input_ids=torch.randint(0, 1000, (rows, context)),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        mask = torch.ones(rows, context + steps + 3, dtype=torch.long)
        timed = 0.0
        for i in range(steps + 2):
            started = time.perf_counter()
            model(
                input_ids=torch.randint(0, 1000, (rows, 1)), attention_mask=mask[:, : context + i + 1],
                position_ids=torch.full((rows, 1), context + i), past_key_values=cache, use_cache=True,
                logits_to_keep=1,
            )  # fmt: skip
            if i >= 2:  # two warm-up steps
                timed += time.perf_counter() - started
    return timed / steps


def prefill_seconds(model: torch.nn.Module, rows: int, context: int) -> float:
    """Seconds of one prefill of ``rows`` prompts of ``context`` tokens."""
    with torch.inference_mode():
        started = time.perf_counter()
        model(input_ids=torch.randint(0, 1000, (rows, context)), use_cache=False, logits_to_keep=1)
        return time.perf_counter() - started


def token_logprobs(model: torch.nn.Module, sequence: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """Log-probabilities of ``sequence``'s tokens after ``prompt_length``, in fp32."""
    with torch.inference_mode():
        logits = model(sequence).logits.float()[0, prompt_length - 1 : -1]
    return torch.log_softmax(logits, -1).gather(1, sequence[0, prompt_length:, None]).squeeze(1)


def main() -> None:
    """Time both dtypes, measure the mismatch, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument(
        "--shapes", default="1x50,12x1000,32x300,32x1000", help="decode shapes, rows x context"
    )
    parser.add_argument("--steps", type=int, default=8, help="timed decode steps per shape and dtype")
    parser.add_argument("--prefill", default="4x1000", help="prefill shape, rows x prompt tokens")
    parser.add_argument("--samples", type=int, default=4, help="sampled completions for the mismatch")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    flags = cpu_flags()
    print(f"CPU reports avx512_bf16: {'avx512_bf16' in flags}, amx_bf16: {'amx_bf16' in flags}; "
          f"{args.threads} torch thread(s)")  # fmt: skip
    path = resolve_model_path(BUNDLED_MODEL)
    fp32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    bf16 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    print(f"{'decode step':24} {'fp32 ms':>9} {'bf16 ms':>9} {'bf16/fp32':>10}")
    for shape in args.shapes.split(","):
        rows, context = (int(n) for n in shape.split("x"))
        a = decode_seconds(fp32, rows, context, args.steps)
        b = decode_seconds(bf16, rows, context, args.steps)
        print(f"{f'{rows} rows x {context} tokens':24} {a * 1000:9.1f} {b * 1000:9.1f} {b / a:10.2f}")
    rows, context = (int(n) for n in args.prefill.split("x"))
    a, b = prefill_seconds(fp32, rows, context), prefill_seconds(bf16, rows, context)
    print(f"{f'prefill {rows} x {context}':24} {a * 1000:9.0f} {b * 1000:9.0f} {b / a:10.2f}")
    tokenizer = AutoTokenizer.from_pretrained(path)
    gaps: list[torch.Tensor] = []
    for prompt in PROMPTS[: args.samples]:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )["input_ids"]
        with torch.inference_mode():
            sequence = fp32.generate(
                ids, max_new_tokens=args.max_new_tokens, do_sample=True, temperature=1.0,
                pad_token_id=tokenizer.eos_token_id,
            )  # fmt: skip
        gaps.append(
            token_logprobs(bf16, sequence, ids.shape[1]) - token_logprobs(fp32, sequence, ids.shape[1])
        )
    gap = torch.cat(gaps)
    ratio = gap.exp()
    print(f"{gap.numel()} sampled tokens scored by both: |logprob bf16 - fp32| mean {gap.abs().mean():.4f}, "
          f"largest {gap.abs().max():.4f}; importance ratio exp(bf16 - fp32) {ratio.min():.3f} .. {ratio.max():.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
