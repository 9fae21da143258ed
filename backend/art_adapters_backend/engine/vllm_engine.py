"""The GPU inference engine: vLLM's OpenAI server run as its own process, behind our engine interface.

Documented vLLM interfaces only:

- ``vllm serve <model> --enable-lora --enable-sleep-mode --logprobs-mode processed_logprobs``
  started as a subprocess on 127.0.0.1, with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (runtime
  LoRA endpoints) and ``VLLM_SERVER_DEV_MODE=1`` (the ``/sleep`` and ``/wake_up`` endpoints);
- ``POST /v1/completions`` with the prompt as token ids (our chat template renders it, so the
  record's prompt is exactly what vLLM saw), ``logprobs=0`` (the sampled token's log-prob,
  after temperature: ``processed_logprobs``), ``return_token_ids=true`` (the sampled ids; older
  servers: ``return_tokens_as_token_ids=true`` and the ids parsed from ``token_id:N``);
- ``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` for checkpoints;
- ``POST /sleep?level=1`` / ``POST /wake_up`` around a training step (:meth:`paused`), so the
  trainer has the GPU memory; requests arriving meanwhile wait here and then run.

Limits of this thin path: streaming yields each choice in one delta; constrained decoding
supports a JSON schema without prefix/suffix (``response_format``) through vLLM's
``structured_outputs``; forced tool calls (prefix + JSON + suffix) are refused with a clear error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from .base import ContextLengthError, EngineStats, GeneratedSequence, GenerationRequest, SequenceDelta

__all__ = ["VllmEngine", "vllm_available"]

logger = logging.getLogger(__name__)

SERVED_BASE = "base"


def vllm_available() -> str | None:
    """``None`` when vLLM can run here, else why not (for skips and errors)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install vllm on a CUDA machine)"
    try:
        import torch
    except ImportError:  # pragma: no cover
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "vLLM needs a CUDA GPU and none is visible"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VllmEngine:
    """Inference through a ``vllm serve`` subprocess (see the module docstring).

    Build it with :meth:`load`; the server's :class:`~..state.ServerState` uses it like the torch
    engine: ``generate``, ``stream``, ``load_adapter``, ``unload_adapter``, ``paused``, ``close``.
    """

    def __init__(self, model_path: Path, tokenizer: Any, process: subprocess.Popen[bytes] | None, base_url: str,
                 context_length: int, eos_token_ids: set[int]) -> None:  # fmt: skip
        self.model_path = model_path
        self.tokenizer = tokenizer
        self.process = process
        self.base_url = base_url
        self.context_length = context_length
        self.eos_token_ids = eos_token_ids
        self._http = httpx.AsyncClient(base_url=base_url, timeout=600)
        self._awake = asyncio.Event()
        self._awake.set()
        self._pause_lock = asyncio.Lock()
        self._in_flight = 0
        self._idle = asyncio.Condition()
        self._adapters: set[str] = set()
        self._stats = EngineStats()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def load(cls, path: Path, *, port: int | None = None, extra_args: list[str] | None = None,
             startup_timeout: float = 900.0, max_lora_rank: int = 64, max_loras: int = 8,
             log_path: Path | None = None) -> VllmEngine:  # fmt: skip
        """Start ``vllm serve`` on ``path`` and wait for ``/health`` (blocking; call it in a thread).

        ``max_loras`` (vLLM's ``--max-loras``) is how many adapters one batch may mix; the server
        passes its ``max_loaded_adapters``, so every adapter it keeps loaded can share a batch.

        Raises:
            RuntimeError: vLLM cannot run here, or the server exited / did not become healthy.
        """
        from ..bundled import load_tokenizer

        reason = vllm_available()
        if reason is not None:
            raise RuntimeError(f"the vLLM engine cannot start: {reason}; use --engine torch")
        port = port or _free_port()
        executable = shutil.which("vllm")
        command = [executable] if executable else [sys.executable, "-m", "vllm.entrypoints.cli.main"]
        command += [
            "serve", str(path), "--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_BASE,
            "--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras", str(max_loras),
            "--enable-sleep-mode",
            "--logprobs-mode", "processed_logprobs", *(extra_args or []),
        ]  # fmt: skip
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_SERVER_DEV_MODE": "1"}
        log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - the child keeps it
        logger.info("starting vLLM: %s", " ".join(command))
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"vllm serve exited with code {process.returncode}; see {log_path or 'its log'}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"vllm serve did not become healthy within {startup_timeout:.0f} s")
            time.sleep(1.0)
        tokenizer = load_tokenizer(path)
        info = httpx.get(f"{base_url}/v1/models", timeout=10).json()["data"][0]
        context_length = int(info.get("max_model_len") or tokenizer.model_max_length)
        eos = {int(tokenizer.eos_token_id)}
        return cls(path, tokenizer, process, base_url, context_length, eos)

    async def start(self) -> None:
        """Nothing to start: the vLLM process is already serving."""

    async def close(self) -> None:
        """Stop the vLLM process and close the client."""
        await self._http.aclose()
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()

    def stats(self) -> EngineStats:
        """Counters of the requests this engine sent."""
        return self._stats

    # ------------------------------------------------------------------ adapters

    @property
    def adapters(self) -> set[str]:
        """Names of the loaded LoRA adapters."""
        return set(self._adapters)

    async def load_adapter(self, name: str, path: Path) -> None:
        """``POST /v1/load_lora_adapter``; the adapter then answers ``model=name``."""
        await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        self._adapters.add(name)

    async def unload_adapter(self, name: str) -> None:
        """``POST /v1/unload_lora_adapter``."""
        await self._post("/v1/unload_lora_adapter", {"lora_name": name})
        self._adapters.discard(name)

    async def _post(self, path: str, body: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        response = await self._http.post(path, json=body, **kwargs)
        if response.is_error:
            raise RuntimeError(f"vLLM answered {response.status_code} to {path}: {response.text[:500]}")
        return response

    # ------------------------------------------------------------------ pausing (sleep / wake)

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """Sleep vLLM (level 1: weights to CPU, KV cache freed) once running requests end; wake it after.

        Requests arriving meanwhile wait and then run; none fails.
        """
        async with self._pause_lock:
            self._awake.clear()
            async with self._idle:
                await self._idle.wait_for(lambda: self._in_flight == 0)
            await self._post("/sleep", params={"level": 1})
            try:
                yield
            finally:
                await self._post("/wake_up")
                self._awake.set()

    # ------------------------------------------------------------------ generation

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        params = request.params
        if len(request.prompt_token_ids) + params.max_tokens > self.context_length:
            raise ContextLengthError(
                f"the prompt ({len(request.prompt_token_ids)} tokens) plus max_tokens ({params.max_tokens}) "
                f"exceeds the context length {self.context_length}"
            )
        body: dict[str, Any] = {
            "model": request.adapter or SERVED_BASE,
            "prompt": list(request.prompt_token_ids),
            "n": request.n,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": max(params.top_logprobs, 0),
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        constraint = request.constraint
        if constraint is not None:
            if constraint.prefix or constraint.suffix:
                raise ValueError(
                    "forced tool calls (constrained prefix + JSON + suffix) are not supported by the vLLM "
                    "engine yet; use tool_choice='auto' or the torch engine"
                )
            body["structured_outputs"] = {"json": constraint.json_schema}
        return body

    def _sequence(self, index: int, choice: dict[str, Any], params: Any) -> GeneratedSequence:
        logprobs = choice.get("logprobs") or {}
        tokens = logprobs.get("tokens") or []
        ids = choice.get("token_ids")
        if ids is None:
            ids = [int(t.split(":", 1)[1]) for t in tokens]
        values = [float(x) if x is not None else 0.0 for x in (logprobs.get("token_logprobs") or [])]
        top = None
        if params.top_logprobs > 0:
            top = [
                [(int(k.split(":", 1)[1]), float(v)) for k, v in (row or {}).items()][: params.top_logprobs]
                for row in logprobs.get("top_logprobs") or []
            ]
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        eos = bool(ids) and ids[-1] in self.eos_token_ids and finish == "stop"
        return GeneratedSequence(
            index=index, token_ids=list(ids), logprobs=values, text=choice.get("text", ""),
            finish_reason=finish, top_logprobs=top, eos=eos,
        )  # fmt: skip

    async def generate(self, request: GenerationRequest) -> list[GeneratedSequence]:
        """Sample ``request.n`` choices through vLLM (waits while a training step holds it asleep)."""
        body = self._body(request)
        await self._awake.wait()
        async with self._idle:
            self._in_flight += 1
        try:
            response = await self._post("/v1/completions", body)
        finally:
            async with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()
        choices = sorted(response.json()["choices"], key=lambda c: c["index"])
        out = [self._sequence(c["index"], c, request.params) for c in choices]
        self._stats.requests += 1
        self._stats.sequences += len(out)
        self._stats.tokens_generated += sum(len(s.token_ids) for s in out)
        return out

    async def stream(self, request: GenerationRequest) -> AsyncIterator[SequenceDelta]:
        """Each choice as one delta (the thin path does not stream token by token)."""
        for seq in await self.generate(request):
            yield SequenceDelta(
                index=seq.index, token_ids=seq.token_ids, logprobs=seq.logprobs, text=seq.text,
                finish_reason=seq.finish_reason, top_logprobs=seq.top_logprobs, eos=seq.eos,
            )  # fmt: skip
