"""``ServeLimits``: what one request may ask of the server, so that no request can stall it.

Every bound is a ``serve`` flag of the same name (``max_request_bytes`` is ``--max-request-bytes``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt

__all__ = ["MAX_STOP_CHARS", "MAX_TOOLS", "ServeLimits"]

#: The longest stop string a request may send, in characters. Stop strings have this fixed bound (and at
#: most 4 of them, OpenAI's limit), not a flag: the decode loop looks for them after every token.
MAX_STOP_CHARS = 512

#: The most ``tools`` any chat request may carry, whatever ``--max-tools``: checked on the raw
#: list while the body is parsed, before a single tool is validated (``--max-tools`` is checked next).
MAX_TOOLS = 4096

_MIB = 1 << 20


class ServeLimits(BaseModel):
    """Bounds on requests, each a ``serve`` flag of the same name (its help the field's ``description``).

    A request past a per-request bound is refused with a 400 (413 for a body) that names the bound
    and its flag; a request that only finds the server full is refused with a 429 and
    ``Retry-After``, and may be sent again.

    Attributes:
        max_request_bytes: largest request body, in bytes, on every route but training; larger
            ones get a 413 before the body is read (``Content-Length``) or as soon as the bytes
            read pass it (chunked bodies). Default 4 MiB (the bundled model's whole 8,192-token
            context is about 32 KB of text).
        max_train_request_bytes: the same for ``POST /art/models/{name}/train``, whose body
            carries whole trajectory groups. Default 64 MiB.
        max_tools: most ``tools`` in one chat request (OpenAI's limit). Default 128; at most
            :data:`MAX_TOOLS`, the bound checked while the body is parsed, before any tool is.
        max_schema_bytes: largest JSON schema (a tool's ``parameters``, a
            ``response_format`` schema), in bytes of compact JSON. Default 64 KiB.
        max_schema_depth: deepest JSON nesting of such a schema (objects and arrays; one
            ``{"type": "object", "properties": {...}}`` level is two). Compiling a schema costs
            about the cube of its depth: 64 takes milliseconds, 400 took 16 s. Default 64.
        max_constraint_bytes: most bytes of tool schemas (compact JSON) one forced tool call
            (``tool_choice: "required"`` or a named function) may join into its grammar, which is
            compiled per request at a cost that grows with it. Default 128 KiB.
        max_request_tokens: most output one chat request may ask for, counted as
            ``n x max_tokens x (1 + top_logprobs)`` (the ``max_tokens`` used when none is sent
            included); above it, a 400. Default 262,144 (16 choices of the whole 8,192-token
            context with one alternative per token).
        max_concurrent_requests: most chat completions in progress at once (prompt rendering,
            queued, decoding, streaming); one more is refused with a 429. Default 256.
        max_queued_sequences: most choices waiting for a place in the engine's batch (choices
            in progress beyond ``max_batch_size``); a request that would queue more is refused
            with a 429 (a 400 if its ``n`` alone could never fit). Default 1,024.
        max_lora_rank: largest ``lora_rank`` a training request may ask for. Default 256.
        max_micro_batch_size: largest ``micro_batch_size`` of a training request. Default 64.
        max_train_sequence_length: largest ``max_sequence_length`` of a training request, in
            tokens; the served model's context length bounds it too (a longer sequence could
            never be scored). Default 32,768.
        max_train_groups: most trajectory groups in one training request. Default 1,024.
        max_group_trajectories: most trajectories in one group of a training request (an SFT
            request's trajectories count as one group). Default 256.
        max_train_iterations: largest ``num_iterations`` (passes over the step's sequences) of a
            GRPO request. Inference is paused for the whole step, so each bound on its length is
            also a bound on how long completions wait. Default 16.
        max_train_mini_batches: largest ``mini_batches`` (optimizer updates per pass) of a GRPO
            request. Default 64.
        max_sft_epochs: largest ``epochs`` of an SFT request. Default 16.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_request_bytes: PositiveInt = 4 * _MIB
    """Largest request body in bytes (413 beyond; training has its own)."""
    max_train_request_bytes: PositiveInt = 64 * _MIB
    """Largest body of a train request, in bytes."""
    max_tools: PositiveInt = Field(128, le=MAX_TOOLS)
    """Most tools in one chat request."""
    max_schema_bytes: PositiveInt = 64 * 1024
    """Largest JSON schema (tool parameters, response_format), in bytes."""
    max_schema_depth: PositiveInt = 64
    """Deepest nesting of such a schema (objects and arrays)."""
    max_constraint_bytes: PositiveInt = 128 * 1024
    """Most bytes of tool schemas one forced tool call joins into a grammar."""
    max_request_tokens: PositiveInt = 262_144
    """Most n x max_tokens x (1 + top_logprobs) per chat request (400 beyond)."""
    max_concurrent_requests: PositiveInt = 256
    """Most chat completions in progress (429 + Retry-After beyond)."""
    max_queued_sequences: NonNegativeInt = 1024
    """Most choices waiting for a batch slot (429 + Retry-After beyond)."""
    max_lora_rank: PositiveInt = 256
    """Largest lora_rank a train request may ask for."""
    max_micro_batch_size: PositiveInt = 64
    """Largest micro_batch_size of a train request."""
    max_train_sequence_length: PositiveInt = 32_768
    """Largest max_sequence_length of a train request, in tokens."""
    max_train_groups: PositiveInt = 1024
    """Most trajectory groups in one train request."""
    max_group_trajectories: PositiveInt = 256
    """Most trajectories in one group of a train request."""
    max_train_iterations: PositiveInt = 16
    """Largest num_iterations of a train request (inference waits meanwhile)."""
    max_train_mini_batches: PositiveInt = 64
    """Largest mini_batches of a train request."""
    max_sft_epochs: PositiveInt = 16
    """Largest epochs of an SFT request."""
