"""The GPU inference engine: vLLM's OpenAI server run as its own process, behind our engine interface.

Prompts go to vLLM as token ids (our renderer stays the one source of the prompt), constraints as
xgrammar ``structured_outputs`` in the torch engine's language, and the server sleeps during a training
step. Written against vLLM's documented interfaces as of v0.12 (the ``structured_outputs`` request
field that replaced ``guided_*``); :class:`VllmEngine` tells the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ...errors import EngineUnavailableError
from .base import (
    Constraint,
    ContextLengthError,
    EngineStats,
    GeneratedSequence,
    GenerationRequest,
    SamplingParams,
    SequenceDelta,
)
from .constraint import ConstraintError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "LOCAL_URL",
    "VllmEngine",
    "constraint_grammar",
    "sampling_body",
    "structured_outputs",
    "vllm_available",
    "private_socket_dir",
    "vllm_environment",
    "vllm_serve_command",
]

logger = logging.getLogger(__name__)

SERVED_BASE = "base"
#: The base URL of requests over vLLM's Unix socket (the host name is only sent as ``Host``).
LOCAL_URL = "http://vllm.local"

#: ``SamplingParams`` fields sent under the same name as vLLM's completions parameters, with the
#: value that means "off" (not sent). ``top_k`` is off at 0 or below, ``logit_bias`` when empty.
_EXTRA_SAMPLING: tuple[tuple[str, Any], ...] = (
    ("frequency_penalty", 0.0),
    ("presence_penalty", 0.0),
    ("repetition_penalty", 1.0),
    ("min_p", 0.0),
    ("min_tokens", 0),
)


def vllm_serve_command(
    model_path: str | Path,
    *,
    uds: str | Path,
    family_flags: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    max_lora_rank: int = 64,
    max_loras: int = 8,
    launcher: Sequence[str] | None = None,
) -> list[str]:
    """The ``vllm serve`` command line (pure: nothing is looked up but ``launcher``'s default).

    On the Unix socket ``uds`` only (vLLM's ``--uds``: no TCP port; ``--host`` and ``--port`` would be
    ignored), with ``--enable-lora``, ``--enable-sleep-mode``, ``--logprobs-mode
    processed_logprobs`` (the sampled token's log-prob after temperature), the model family's own flags
    (``--chat-template`` with the run's ``chat_template.jinja``, ``--enable-auto-tool-choice
    --tool-call-parser P``, ``--reasoning-parser R``: passed so the server is the one a checkpoint is
    deployed on) and ``--structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace":
    true}'``, so vLLM compiles every constraint with xgrammar without free whitespace, as the torch engine
    does (docs.vllm.ai "Structured Outputs"; ``StructuredOutputsConfig`` in
    ``vllm/config/structured_outputs.py``). With a reasoning parser vLLM would apply a constraint only
    after ``</think>``; ours cover the whole reply (a forced call starts with the family's empty thinking
    block), so the config then also sets ``"enable_in_reasoning": true``.

    Args:
        model_path: the base model folder.
        uds: the socket's path, in a folder only this user can enter (:func:`private_socket_dir`).
        family_flags: the model family's flags (:meth:`~..model_family.ModelFamily.vllm_flags`);
            with ``--reasoning-parser`` among them, constraints also apply while reasoning.
        extra_args: more ``vllm serve`` flags, appended last.
        max_lora_rank: ``--max-lora-rank``.
        max_loras: ``--max-loras``: how many adapters one batch may mix.
        launcher: the program to run; default the ``vllm`` executable, else ``python -m``
            vLLM's CLI module.
    """
    if launcher is None:
        executable = shutil.which("vllm")
        launcher = [executable] if executable else [sys.executable, "-m", "vllm.entrypoints.cli.main"]
    structured: dict[str, Any] = {"backend": "xgrammar", "disable_any_whitespace": True}
    if "--reasoning-parser" in family_flags:
        structured["enable_in_reasoning"] = True
    return [
        *launcher, "serve", str(model_path), "--uds", str(uds),
        "--served-model-name", SERVED_BASE,
        "--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras", str(max_loras),
        "--enable-sleep-mode", "--logprobs-mode", "processed_logprobs",
        "--structured-outputs-config", json.dumps(structured),
        *family_flags, *extra_args,
    ]  # fmt: skip


def vllm_environment(api_key: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``vllm serve`` environment: ``base`` (default ours) plus runtime LoRA loading
    (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``), the dev endpoints ``/sleep`` and ``/wake_up``
    (``VLLM_SERVER_DEV_MODE``) and ``VLLM_API_KEY`` (vLLM's ``--api-key``, given by environment so it
    is not on the command line that ``ps`` shows)."""
    return {
        **(os.environ if base is None else base),
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_API_KEY": api_key,
    }


def constraint_grammar(constraint: Constraint) -> str:
    """The xgrammar EBNF of ``"prefix" JSON(schema) "suffix"``: the torch engine's grammar, as text.

    Built with the same xgrammar calls as the torch engine: ``Grammar.from_json_schema(any_whitespace=False,
    strict_mode=True)`` between two literals.

    Raises:
        ConstraintError: the schema cannot be compiled.
    """
    import xgrammar as xgr

    def literal(text: str) -> Any:
        return xgr.Grammar.from_ebnf("root ::= " + json.dumps(text))

    try:
        # Key order kept: the grammar emits properties in the schema's order.
        schema = json.dumps(constraint.json_schema)
        parts = [literal(constraint.prefix)] if constraint.prefix else []
        parts.append(xgr.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=True))
        if constraint.suffix:
            parts.append(literal(constraint.suffix))
        grammar = xgr.Grammar.concat(*parts) if len(parts) > 1 else parts[0]
    except (RuntimeError, ValueError, TypeError) as exc:
        message = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ConstraintError(f"cannot use the JSON schema: {message}") from exc
    return str(grammar)


def structured_outputs(constraint: Constraint) -> dict[str, Any]:
    """vLLM's ``structured_outputs`` for a constraint: ``json`` for a bare schema, else ``grammar``.

    A constraint (:class:`~.base.Constraint`: ``prefix + JSON(schema) + suffix``) means what it means
    for the torch engine (:mod:`.constraint`):

    - with a prefix or suffix (a forced tool call: hermes's ``<tool_call>`` block, Qwen3's empty
      thinking block before it) it is sent as ``grammar``, the xgrammar EBNF of :func:`constraint_grammar`.
      Chosen over ``structural_tag`` because a structural tag's ``json_schema`` element always allows
      free whitespace, so it would accept a larger language than the torch engine;
    - without (``response_format``; ``llama3_json``'s forced call, which is bare JSON) it is sent as
      ``json``, which the server compiles with xgrammar without free whitespace
      (:func:`vllm_serve_command`). With the backend fixed, a schema xgrammar cannot take is refused by
      vLLM (400), answered by :meth:`VllmEngine.generate` as :class:`~.constraint.ConstraintError`.
    """
    if not constraint.prefix and not constraint.suffix:
        return {"json": constraint.json_schema}
    return {"grammar": constraint_grammar(constraint)}


def sampling_body(params: SamplingParams) -> dict[str, Any]:
    """vLLM's completions sampling parameters for ``params`` (those left at "off" are not sent)."""
    body: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p}
    if params.seed is not None:
        body["seed"] = params.seed
    for name, off in _EXTRA_SAMPLING:
        value = getattr(params, name, None)
        if value is not None and value != off:
            body[name] = value
    top_k = getattr(params, "top_k", None)
    if top_k is not None and top_k > 0:
        body["top_k"] = int(top_k)
    logit_bias = getattr(params, "logit_bias", None)
    if logit_bias:
        items = logit_bias.items() if isinstance(logit_bias, dict) else logit_bias
        body["logit_bias"] = {str(int(token)): float(bias) for token, bias in items}
    return body


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


def eos_token_ids(path: Path, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The ids that end a sequence, as vLLM stops on them: the tokenizer's EOS and the generation config's."""
    ids = {int(tokenizer.eos_token_id)}
    config = Path(path) / "generation_config.json"
    if config.is_file():
        configured = json.loads(config.read_text(encoding="utf-8")).get("eos_token_id")
        ids.update([configured] if isinstance(configured, int) else (configured or []))
    return {int(i) for i in ids}


def _error_message(response: httpx.Response) -> str:
    """The message of vLLM's error body (``{"error": {"message": ...}}``; older: ``{"message": ...}``)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else body.get("message")
        if message:
            return str(message)
    return response.text[:500]


def private_socket_dir() -> Path:
    """A new folder for vLLM's socket, mode ``0o700`` (whatever the umask): only this user can connect."""
    folder = Path(tempfile.mkdtemp(prefix="art-vllm-"))
    folder.chmod(0o700)
    return folder


def _wait_healthy(process: subprocess.Popen[bytes], uds: Path, timeout: float, log: str) -> None:
    """Poll ``GET /health`` over the socket until 200 (blocking).

    Raises:
        RuntimeError: the process exited, or it was not healthy within ``timeout`` seconds (then killed).
    """
    deadline = time.monotonic() + timeout
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(uds)), base_url=LOCAL_URL, timeout=2) as http:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vllm serve exited with code {process.returncode}; see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if http.get("/health").status_code == 200:
                    return
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"vllm serve did not become healthy within {timeout:.0f} s")
            time.sleep(1.0)


class VllmEngine:
    """Inference through a ``vllm serve`` subprocess (:func:`vllm_serve_command`).

    Build it with :meth:`load`; the server's :class:`~...state.ServerState` uses it like the torch
    engine: ``generate``, ``stream``, ``load_adapter``, ``unload_adapter``, ``paused``, ``close``.

    Requests go to ``POST /v1/completions`` with the prompt as token ids, ``logprobs=0`` (the sampled
    token's), ``return_token_ids=true`` (older servers: ``return_tokens_as_token_ids=true``, the ids
    parsed from ``token_id:N``), the extra sampling parameters vLLM documents for completions
    (:func:`sampling_body`) and ``structured_outputs`` (:func:`structured_outputs`); stop strings are not
    sent with a constraint (the torch engine ignores them too: they could cut the JSON). Checkpoints are
    loaded with ``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter``; a training step runs
    between ``/sleep`` and ``/wake_up`` (:meth:`paused`).

    Why completions with token ids, not vLLM's chat endpoint: our renderer (:mod:`..chat_template`,
    tested equal to the model's chat template) stays the one source of the prompt, so the record's
    prompt ids are exactly what vLLM saw, and tools, ``tool_choice``, ``response_format`` and reasoning
    are handled once, in :mod:`..chat`, for both engines.

    Access: runtime LoRA loading and the dev endpoints are on. vLLM checks its API key (a fresh random
    one at every start, sent as ``Authorization: Bearer`` here) only on the ``/v1`` routes, so it serves
    on a Unix socket (``uds``) in a ``0o700`` folder of ours, not on a TCP port: no other local user can
    reach ``/sleep`` or ``/wake_up``. The folder (``socket_dir``) is removed by :meth:`close`.

    Limits of this thin path: streaming yields each choice in one delta; a constrained choice ends with
    the EOS token vLLM samples once the grammar is complete (the torch engine stops without sampling
    it), so its record has one more token.
    """

    # shape: one vLLM server connection's settings, one keyword each (built by start())
    def __init__(self, model_path: Path, tokenizer: PreTrainedTokenizerBase,
                 process: subprocess.Popen[bytes] | None, base_url: str, context_length: int,
                 eos_token_ids: set[int], *, api_key: str | None = None, sleep_timeout_s: float = 300.0,
                 wake_timeout_s: float = 300.0, wake_attempts: int = 3, uds: str | Path | None = None,
                 socket_dir: Path | None = None) -> None:  # fmt: skip
        self.model_path = model_path
        self.tokenizer = tokenizer
        self.process = process
        self.base_url = base_url
        self.context_length = context_length
        self.eos_token_ids = eos_token_ids
        self.sleep_timeout_s = sleep_timeout_s
        self.wake_timeout_s = wake_timeout_s
        self.wake_attempts = max(1, wake_attempts)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.socket_dir = socket_dir
        transport = httpx.AsyncHTTPTransport(uds=str(uds)) if uds is not None else None
        self._http = httpx.AsyncClient(base_url=base_url, timeout=600, headers=headers, transport=transport)
        self._awake = asyncio.Event()
        self._awake.set()
        self._asleep_error: str | None = None  # why the last wake-up failed; requests get a 503
        self._pause_lock = asyncio.Lock()
        self._in_flight = 0
        self._idle = asyncio.Condition()
        self._adapters: set[str] = set()
        self._stats = EngineStats()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def load(cls, path: Path, *, family_flags: Sequence[str] = (),
             extra_args: Sequence[str] = (), startup_timeout: float = 900.0, max_lora_rank: int = 64,
             max_loras: int = 8, log_path: Path | None = None) -> VllmEngine:  # fmt: skip
        """Start ``vllm serve`` on ``path`` on a private Unix socket and wait for ``/health`` (blocking;
        call it in a thread).

        ``family_flags`` are the model family's ``vllm serve`` flags (its chat template file and
        parsers, :meth:`~..model_family.ModelFamily.vllm_flags`); ``max_loras`` (vLLM's
        ``--max-loras``) is how many adapters one batch may mix; the server passes its
        ``max_loaded_adapters``, so every adapter it keeps loaded can share a batch.

        Raises:
            RuntimeError: vLLM cannot run here, or the server exited / did not become healthy.
        """
        from ...bundled import load_tokenizer

        reason = vllm_available()
        if reason is not None:
            raise RuntimeError(f"the vLLM engine cannot start: {reason}; use --engine torch")
        socket_dir = private_socket_dir()
        uds = socket_dir / "vllm.sock"
        command = vllm_serve_command(
            path, uds=uds, family_flags=family_flags, extra_args=extra_args,
            max_lora_rank=max_lora_rank, max_loras=max_loras,
        )  # fmt: skip
        api_key = secrets.token_urlsafe(32)  # a new one at every start; only this process knows it
        env = vllm_environment(api_key)
        log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - the child keeps it
        logger.info("starting vLLM: %s", " ".join(command))
        try:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            _wait_healthy(process, uds, startup_timeout, str(log_path or "its log"))
        except BaseException:
            shutil.rmtree(socket_dir, ignore_errors=True)
            raise
        tokenizer = load_tokenizer(path)
        auth = {"Authorization": f"Bearer {api_key}"}
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(uds)), base_url=LOCAL_URL, timeout=10) as http:
            info = http.get("/v1/models", headers=auth).json()["data"][0]
        context_length = int(info.get("max_model_len") or tokenizer.model_max_length)
        return cls(path, tokenizer, process, LOCAL_URL, context_length, eos_token_ids(path, tokenizer),
                   api_key=api_key, uds=uds, socket_dir=socket_dir)  # fmt: skip

    async def start(self) -> None:
        """Nothing to start: the vLLM process is already serving."""

    async def close(self) -> None:
        """Stop the vLLM process, close the client and remove the socket's folder."""
        await self._http.aclose()
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()
        if self.socket_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)

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

        Requests arriving meanwhile wait and then run. Whatever happens, waiting requests are
        released: if ``/sleep`` fails or times out, vLLM is woken again and the error propagates
        (the training step fails, inference goes on); if it cannot be woken after the step,
        requests get a 503 until a later wake-up succeeds.
        """
        async with self._pause_lock:
            self._awake.clear()
            try:
                async with self._idle:
                    await self._idle.wait_for(lambda: self._in_flight == 0)
                slept = False
                try:
                    await self._post("/sleep", params={"level": 1}, timeout=self.sleep_timeout_s)
                    slept = True
                finally:
                    if not slept:  # it may have gone to sleep before the error (a timeout): wake it
                        await self._wake()
                try:
                    yield
                finally:
                    await self._wake()
            finally:
                self._awake.set()

    async def _wake(self, attempts: int | None = None) -> bool:
        """``POST /wake_up`` with a timeout, ``attempts`` times at most (default ``wake_attempts``);
        records the failure for :meth:`_check_awake`."""
        error = ""
        attempts = attempts or self.wake_attempts
        for attempt in range(1, attempts + 1):
            try:
                await self._post("/wake_up", timeout=self.wake_timeout_s)
            except (httpx.HTTPError, RuntimeError) as exc:
                error = f"{type(exc).__name__}: {exc}"
                logger.warning("vLLM did not wake up (attempt %d/%d): %s", attempt, attempts, error)
                continue
            if self._asleep_error is not None:
                logger.info("vLLM is awake again")
            self._asleep_error = None
            return True
        self._asleep_error = error
        logger.error("vLLM could not be woken up; requests get 503 until it is (%s)", error)
        return False

    async def _check_awake(self) -> None:
        """Raise :class:`EngineUnavailableError` (503) if vLLM is asleep and one more wake-up fails."""
        if self._asleep_error is None:
            return
        async with self._pause_lock:
            if self._asleep_error is not None and not await self._wake(attempts=1):
                raise EngineUnavailableError(
                    f"the vLLM engine could not be woken up after a training step ({self._asleep_error}); "
                    "retry later, or restart the server",
                    code="engine_unavailable",
                )

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
            **sampling_body(params),
            "logprobs": max(params.top_logprobs, 0),
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
        }
        if request.constraint is not None:
            body["structured_outputs"] = structured_outputs(request.constraint)
        elif params.stop:
            body["stop"] = list(params.stop)
        return body

    def _text(self, token_ids: list[int], stop: Sequence[str], min_tokens: int = 0) -> str:
        """The text of ``token_ids`` by the torch engine's rule (:class:`~.text.TextTracker`).

        Decoded with ``skip_special_tokens=False`` (the caller leaves the final EOS out) and cut before
        the first stop string that does not start inside the text of the first ``min_tokens`` tokens
        (vLLM's ``min_tokens``), so ``<think>``, ``<tool_call>`` and other added tokens stay in the text
        the reasoning and tool-call parsers read. vLLM is asked for ``skip_special_tokens=false`` and
        ``spaces_between_special_tokens=false`` so that its stop-string matching sees that same text.
        One decode of the whole choice, not one per token.
        """
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        stops = [s for s in stop if s]
        if not stops:
            return text
        protected = 0
        if min_tokens:
            protected = len(self.tokenizer.decode(token_ids[:min_tokens], skip_special_tokens=False))
        cuts = [i for s in stops if (i := text.find(s, max(0, protected - len(s) + 1))) >= 0]
        return text[: min(cuts)] if cuts else text

    def _sequence(self, index: int, choice: dict[str, Any], request: GenerationRequest) -> GeneratedSequence:
        params = request.params
        logprobs = choice.get("logprobs") or {}
        ids = choice.get("token_ids")
        if ids is None:
            ids = [int(t.split(":", 1)[1]) for t in logprobs.get("tokens") or []]
        ids = [int(i) for i in ids]
        values = [float(x) if x is not None else 0.0 for x in (logprobs.get("token_logprobs") or [])]
        top = None
        if params.top_logprobs > 0:
            top = [
                [(int(k.split(":", 1)[1]), float(v)) for k, v in (row or {}).items()][: params.top_logprobs]
                for row in logprobs.get("top_logprobs") or []
            ]
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        eos = bool(ids) and ids[-1] in self.eos_token_ids and finish == "stop"
        stop = () if request.constraint is not None else params.stop
        text = self._text(ids[:-1] if eos else ids, stop, int(getattr(params, "min_tokens", 0) or 0))
        return GeneratedSequence(
            index=index, token_ids=ids, logprobs=values, text=text,
            finish_reason=finish, top_logprobs=top, eos=eos,
        )  # fmt: skip

    async def generate(self, request: GenerationRequest) -> list[GeneratedSequence]:
        """Sample ``request.n`` choices through vLLM (waits while a training step holds it asleep)."""
        body = self._body(request)
        await self._awake.wait()
        await self._check_awake()
        async with self._idle:
            self._in_flight += 1
        try:
            response = await self._http.post("/v1/completions", json=body)
        finally:
            async with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()
        if response.status_code == 400 and request.constraint is not None:
            raise ConstraintError(f"vLLM refused the output constraint: {_error_message(response)}")
        if response.is_error:
            raise RuntimeError(
                f"vLLM answered {response.status_code} to /v1/completions: {_error_message(response)}"
            )
        choices = sorted(response.json()["choices"], key=lambda c: c["index"])
        out = [self._sequence(c["index"], c, request) for c in choices]
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
