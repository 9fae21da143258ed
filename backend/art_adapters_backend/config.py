"""``ServeConfig``: every setting of the backend service, validated once."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, SecretStr, model_validator

from .limits import ServeLimits

__all__ = ["ServeConfig", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in {"localhost", "localhost.localdomain"}:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ServeConfig(BaseModel):
    """Settings of ``art-adapters serve`` / ``python -m art_adapters_backend serve``.

    Each field is a ``serve`` flag of the same name (``--allowed-host`` and ``--export-root``, repeated,
    fill the two tuples), its help the field's ``description``; ``limits`` gives one flag per bound.

    Attributes:
        host: address to bind. Default ``127.0.0.1``. Any non-loopback address (e.g.
            ``0.0.0.0``) requires ``api_key``.
        port: TCP port to bind; 0 picks a free one (write it out with ``port_file``). Default 8000.
        run_dir: the run directory: model registry (``registry.json``), exact-token records
            (``completions.jsonl``), checkpoints. Created if missing; survives restarts.
        base_model: the base model served: ``smollm2-135m-instruct`` (bundled, converted once
            and cached) or a Hugging Face causal-LM folder. Served under exactly this id.
        api_key: when set, every request but ``GET /health`` must send
            ``Authorization: Bearer <api_key>``. Required for non-loopback hosts.
        allowed_hosts: without ``api_key`` the server answers only requests whose ``Host``
            is a loopback name (``127.0.0.1``, ``localhost``, ``[::1]``, any port) and whose
            browser ``Origin``, if any, is a loopback URL (403 otherwise; a guard against DNS
            rebinding, see ``host_check``). These further host names (no port; ``*``: any)
            are accepted too. Ignored with ``api_key``. Default none.
        export_roots: folders ``POST /art/models/{name}/export`` may write under, besides
            ``run_dir/exports`` (always allowed); an ``out`` elsewhere is refused with a 403.
            Default none: the HTTP API never writes outside the run directory.
        port_file: if set, the bound port is written there (atomically) once the server
            accepts connections.
        parent_pid: stop (as on SIGTERM) when the process with this pid is no longer our
            parent, however it ended (SIGKILL included); with a pipe as stdin, also when the
            pipe closes. ``LocalBackend`` passes its own pid (see ``parent_watch``). Default
            ``None``: run until stopped.
        max_batch_size: most sequences the engine decodes together (dynamic batching). Default 16 (a
            demo step samples 12 rollouts at once, its evaluation 16; shared prefixes keep each row cheap).
        prefix_cache_bytes: memory of the torch engine's prefix cache, in bytes: keys and values of
            prompts and finished conversations, reused by later prompts that start with the same
            tokens under the same weights (base model, or ``name@step``: never another step's),
            least recently used evicted. A repeated prompt is answered bit for bit as the first
            time; a shared prefix gives logprobs within 1e-5 of computing it all. 0 turns it off.
            The vLLM engine has its own. Default 256 MiB.
        shared_prefixes: the torch engine holds the leading tokens all decoding rows have in common
            (a group's system prompt, tools and question) once and reads them once per decode step,
            and prefills a batch's common prompt start once (logprobs within 1e-5 of not sharing).
            Models with sliding-window or soft-capped attention decode as before. Default on.
        max_loaded_adapters: most LoRA checkpoints kept loaded in the engine; the least recently
            used one no request is using is unloaded first, and loaded again when asked for. Default 8.
        device: torch device of the embedded engine (``cpu``, ``cuda``). Default ``cpu``.
        cache_dir: where the bundled model's converted weights are cached; default: the
            engine's own cache folder.
        default_max_tokens: new tokens per choice when a request sets neither ``max_tokens``
            nor ``max_completion_tokens`` (capped by the room left in the context). Default 512.
        max_n: the largest ``n`` (choices per request) accepted. Default 16.
        limits: bounds on requests (body size, schemas, output, concurrency, training settings),
            each its own ``serve`` flag; see :class:`~.limits.ServeLimits`.
        graceful_shutdown_s: seconds to let in-flight requests finish on SIGTERM. Default 5.
        quiet_memory_return_s: once no request (``/health`` and ``/art/stats`` aside) has run for this many seconds,
            the memory requests freed is handed back to the OS (glibc keeps it otherwise; see
            :mod:`.http.quiet_memory`). 0 never does. Default 1.
        work_nice: how much lower than the event loop's the OS priority (nice value) of the threads
            that decode, train, compile grammars and do request work is (Linux), so the event loop
            answers ``/health`` and admits requests without waiting for a busy CPU. 0: the same
            priority. Default 10.
        log_level: uvicorn's log level. Default ``info``.
        engine: ``torch`` (default; CPU or CUDA, in process) or ``vllm`` (a ``vllm serve``
            subprocess on a CUDA GPU, slept during training steps).
        trainer: ``peft`` (default; transformers + PEFT) or ``unsloth`` (CUDA).
        chat_template: vLLM's ``--chat-template``: a Jinja chat template file (or the template
            text itself) that renders every prompt instead of the model's own. Default: the
            model's own template; for the bundled SmolLM2, the tool-capable one shipped with
            the package. Deploy with the same file.
        tool_call_parser: vLLM's ``--tool-call-parser`` (``hermes``, ``llama3_json``). Default:
            read off the chat template; start-up fails naming this flag when that is ambiguous.
        reasoning_parser: vLLM's ``--reasoning-parser`` (``qwen3``, ``deepseek_r1``). Default:
            read off the chat template (``<think>`` markers); none otherwise.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(
        default="127.0.0.1",
        description="Address to bind. Anything but 127.0.0.1/localhost requires --api-key.",
    )
    port: int = Field(default=8000, ge=0, le=65535, description="Port to bind; 0 picks a free one.")
    run_dir: Path = Field(
        default=Path(".art/backend"),
        description="Run directory: registry, token records, checkpoints. Survives restarts.",
    )
    base_model: str = Field(
        default="smollm2-135m-instruct",
        min_length=1,
        description="Base model: 'smollm2-135m-instruct' (bundled), a Hugging Face model folder, or a Hub id "
        "already in the local Hugging Face cache (nothing is downloaded).",
    )
    api_key: SecretStr | None = Field(
        default=None, description="Require this key (Authorization: Bearer) on every request."
    )
    allowed_hosts: tuple[str, ...] = Field(
        default=(),
        description="Without --api-key only requests addressed to 127.0.0.1, localhost or [::1] (and "
        "loopback browser Origins) are answered, a guard against DNS rebinding; also accept this host name "
        "(repeat; '*': any). Ignored with --api-key.",
    )
    export_roots: tuple[Path, ...] = Field(
        default=(),
        description="POST /art/models/{name}/export writes only under RUN_DIR/exports and these folders "
        "(repeat). Default: none besides RUN_DIR/exports.",
    )
    port_file: Path | None = Field(
        default=None, description="Write the bound port to this file once serving (useful with --port 0)."
    )
    parent_pid: PositiveInt | None = Field(
        default=None,
        description="Stop when the process with this pid ends, however it ends (also when a pipe given as "
        "stdin closes); LocalBackend passes its own.",
    )
    engine: Literal["torch", "vllm"] = Field(
        default="torch",
        description="Inference engine: 'torch' (CPU/CUDA, in process) or 'vllm' (CUDA, own process).",
    )
    trainer: Literal["peft", "unsloth"] = Field(
        default="peft", description="LoRA trainer: 'peft' or 'unsloth' (CUDA)."
    )
    device: str = Field(default="cpu", description="Torch device of the engine and trainer: 'cpu', 'cuda'.")
    max_batch_size: PositiveInt = Field(
        default=16, description="Most sequences decoded together (requests join a running batch)."
    )
    prefix_cache_bytes: int = Field(
        default=256 << 20,
        ge=0,
        description="Memory (bytes) for the torch engine's prefix cache: prompts' keys and values reused by "
        "later prompts that start the same way under the same weights (name@step); 0 turns it off.",
    )
    shared_prefixes: bool = Field(
        default=True,
        description="Torch engine: read the decoding rows' common leading tokens once per step (a group's "
        "prompt, the tools) instead of once per row.",
    )
    max_loaded_adapters: PositiveInt = Field(
        default=8, description="Most LoRA checkpoints kept in memory; the least recently used idle one goes."
    )
    default_max_tokens: PositiveInt = Field(
        default=512, description="New tokens per choice when a request sets no max_tokens."
    )
    max_n: PositiveInt = Field(default=16, description="Largest 'n' (choices per request) accepted.")
    cache_dir: Path | None = Field(
        default=None,
        description="Cache of the bundled model's converted weights (default ~/.cache/art-adapters).",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = Field(
        default="info", description="Server log level."
    )
    chat_template: str | None = Field(
        default=None,
        description="Jinja chat template file (or the template text) rendering every prompt, as vLLM's "
        "--chat-template. Default: the model's own; for the bundled model, the tool template shipped "
        "with it.",
    )
    tool_call_parser: str | None = Field(
        default=None,
        description="Tool-call syntax, as vLLM's --tool-call-parser: hermes, llama3_json. Default: from the "
        "template.",
    )
    reasoning_parser: str | None = Field(
        default=None,
        description="Reasoning syntax, as vLLM's --reasoning-parser: qwen3, deepseek_r1. Default: from the "
        "template.",
    )
    graceful_shutdown_s: float = Field(
        default=5.0, ge=0, description="Seconds in-flight requests get to finish on SIGTERM."
    )
    quiet_memory_return_s: float = Field(
        default=1.0,
        ge=0,
        description="Seconds without requests after which freed memory goes back to the OS (0: never).",
    )
    work_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="Nice increment of the threads that decode, train and do request work (Linux): the "
        "event loop (/health, admission) gets a busy CPU first. 0: the same priority.",
    )
    limits: ServeLimits = Field(
        default_factory=ServeLimits, description="Bounds on requests, each its own flag (see ServeLimits)."
    )

    @model_validator(mode="after")
    def _check_exposure(self) -> ServeConfig:
        if self.api_key is not None and not self.api_key.get_secret_value().strip():
            raise ValueError(
                "the API key is empty: pass a non-empty --api-key / ART_ADAPTERS_API_KEY, or none"
            )
        for name in self.allowed_hosts:
            if not name or name != name.strip() or any(c in name for c in "/@ ") or name.count(":") == 1:
                raise ValueError(
                    f"--allowed-host {name!r}: give a bare host name or address (no scheme, port or path), "
                    "or '*' for any"
                )
        if self.api_key is None and not is_loopback(self.host):
            raise ValueError(
                f"binding {self.host!r} (not a loopback address) would expose the server to the network "
                "without authentication: pass --api-key or set ART_ADAPTERS_API_KEY "
                "(or bind 127.0.0.1)"
            )
        return self

    @property
    def api_key_value(self) -> str | None:
        """The API key in clear, or ``None``."""
        return self.api_key.get_secret_value() if self.api_key is not None else None
