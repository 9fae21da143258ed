"""Chat completions without HTTP: an OpenAI request -> an engine request -> OpenAI choices + a record.

Kept apart from the HTTP routes so the non-streaming path and the streams (:mod:`..http.streaming`)
share one validation and one response/record builder.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import BadRequestError
from ..limits import ServeLimits
from ..workers import run_request_work, run_schema_work
from .chat_template import ChatTemplateError
from .engine.base import Constraint, GeneratedSequence, GenerationRequest, SamplingParams
from .openai_types import ChatCompletionRequest, NamedToolChoice
from .reasoning import ReasoningParser, get_reasoning_parser
from .records import ChoiceRecord, CompletionRecord
from .registry import ServedModel
from .schema_checks import check_forced_size, check_schema, check_schema_bounds
from .tool_parser import ParsedToolCall, ToolCallParser, get_tool_parser

if TYPE_CHECKING:
    from ..state import ServerState
    from .chat_template import ChatTemplate

__all__ = [
    "PreparedChat",
    "choice_body",
    "make_record",
    "new_completion_id",
    "prepare_chat",
    "response_body",
    "sampling_params",
    "too_many_tools",
]

logger = logging.getLogger(__name__)



def new_completion_id() -> str:
    """A fresh completion id, ``chatcmpl-<24 hex>``."""
    return f"chatcmpl-{secrets.token_hex(12)}"


@dataclass
class PreparedChat:
    """A validated request, ready for the engine.

    Attributes:
        request: the parsed OpenAI request.
        served: what its ``model`` resolved to.
        generation: the engine request (prompt ids, sampling, constraint, adapter).
        parse_tools: whether tool calls are parsed out of the replies.
        tool_names: the offered tools.
        completion_id: the response ``id`` and record key.
        created: Unix time of the request.
        tool_parser: the family's tool-call parser (``None`` when tools are not parsed).
        reasoning_parser: the family's reasoning parser, or ``None``.
        chat_template_kwargs: the request's extra template variables (``enable_thinking``...).
    """

    request: ChatCompletionRequest
    served: ServedModel
    generation: GenerationRequest
    parse_tools: bool
    tool_names: list[str]
    tool_parser: ToolCallParser | None = None
    reasoning_parser: ReasoningParser | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    completion_id: str = field(default_factory=new_completion_id)
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def want_logprobs(self) -> bool:
        """Whether choices carry ``logprobs``."""
        return bool(self.request.logprobs)


def _rebase_refs(schema: dict[str, Any], base: str) -> tuple[dict[str, Any], bool]:
    """A copy of ``schema`` whose local ``$ref`` ("#/...") point into it at ``base`` instead of the
    root, and whether it has any. A JSON round trip, not recursion: a schema nested hundreds
    deep is valid and arrived as JSON, so it parses again.
    """
    found = False

    def hook(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal found
        ref = obj.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            obj["$ref"] = base + ref[1:]
            found = True
        return obj

    return json.loads(json.dumps(schema), object_hook=hook), found


def _call_schema(
    parser: ToolCallParser, name: str, parameters: dict[str, Any], defs: dict[str, Any]
) -> dict[str, Any]:
    """The schema of one call of ``name`` in the family's syntax.

    A parameters schema with ``$ref``s (``#/$defs/...``, as pydantic and MCP servers write them) no
    longer sits at the root once wrapped, so it moves to ``defs`` (the root's ``$defs``) under a
    fresh key, its refs rebased there.
    """
    key = f"arguments_{len(defs)}"
    rebased, has_refs = _rebase_refs(parameters, f"#/$defs/{key}")
    if has_refs:
        defs[key] = rebased
        parameters = {"$ref": f"#/$defs/{key}"}
    return parser.call_schema(name, parameters)


def _forced_call(
    options: list[dict[str, Any]], defs: dict[str, Any], parser: ToolCallParser, thinking_block: str
) -> Constraint:
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    if defs:
        schema = {**schema, "$defs": defs}
    return Constraint(json_schema=schema, prefix=thinking_block + parser.call_prefix, suffix=parser.call_suffix)


#: the schema a call to a function whose ``parameters`` were left out must match
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


def _constraint(
    request: ChatCompletionRequest, parser: ToolCallParser | None, reasoning: ReasoningParser | None
) -> Constraint | None:
    """The output constraint: a forced call in the family's syntax, or a JSON response format.

    A forced call from a reasoning model starts with the family's empty thinking block (what its
    template renders for "no thinking"), so the reply is one the model's own format allows.
    """
    choice = request.tool_choice
    tools = {tool.function.name: tool.function.parameters or _ANY_OBJECT for tool in request.tools or []}
    defs: dict[str, Any] = {}
    forced = isinstance(choice, NamedToolChoice) or choice == "required"
    if forced and parser is not None:
        # with thinking turned off the prompt already ends in the empty block
        thinking_block = (
            reasoning.empty_block
            if reasoning is not None and not reasoning.thinking_turned_off(request.chat_template_kwargs)
            else ""
        )
        names = [choice.function.name] if isinstance(choice, NamedToolChoice) else list(tools)
        return _forced_call([_call_schema(parser, n, tools[n], defs) for n in names], defs, parser, thinking_block)
    response_format = request.response_format
    if response_format is not None and response_format.type == "json_object":
        return Constraint(json_schema={"type": "object"})
    if response_format is not None and response_format.type == "json_schema":
        assert response_format.json_schema is not None
        return Constraint(json_schema=response_format.json_schema.schema_)
    return None


def too_many_tools(count: int, limit: int, *, read_no_further: bool = False) -> BadRequestError:
    """The 400 for a request that offers ``count`` tools to a server accepting ``limit`` (``--max-tools``);
    with ``read_no_further`` the body was read only to the first tool past ``limit``, so ``count`` is
    a lower bound and the message says "more than"."""
    offered = f"more than {limit}" if read_no_further else str(count)
    return BadRequestError(
        f"the request offers {offered} tools; this server accepts at most {limit} (serve --max-tools)", param="tools"
    )


def _check_request(request: ChatCompletionRequest, max_n: int, limits: ServeLimits | None = None) -> None:
    """Cross-field rules that pydantic's per-field validation cannot see, and the server's bounds.

    Cheap (runs on the event loop): schemas are bounded here and compiled by :func:`_check_schemas`.
    """
    limits = limits or ServeLimits()
    if request.tools and len(request.tools) > limits.max_tools:
        raise too_many_tools(len(request.tools), limits.max_tools)
    names = request.tool_names
    if request.tool_choice is not None and not names:
        raise BadRequestError(
            "tool_choice is set but no tools were given: pass 'tools' or drop 'tool_choice'",
            param="tool_choice",
        )
    if isinstance(request.tool_choice, NamedToolChoice) and request.tool_choice.function.name not in names:
        raise BadRequestError(
            f"tool_choice names the function {request.tool_choice.function.name!r}, which is not among the "
            f"tools ({', '.join(names)})",
            param="tool_choice",
        )
    forced = request.tool_choice == "required" or isinstance(request.tool_choice, NamedToolChoice)
    if forced and request.response_format is not None and request.response_format.type != "text":
        raise BadRequestError(
            "a forced tool call (tool_choice 'required' or a named function) cannot be combined with a JSON "
            "response_format: drop one of them",
            param="response_format",
        )
    if (request.n or 1) > max_n:
        raise BadRequestError(f"n is {request.n}; this server allows at most {max_n} choices", param="n")
    if request.top_logprobs and not request.logprobs:
        raise BadRequestError("top_logprobs needs logprobs: set 'logprobs': true", param="top_logprobs")
    if request.stream_options is not None and not request.stream:
        raise BadRequestError("stream_options is only allowed with 'stream': true", param="stream_options")
    for param, schema in _schemas(request):
        check_schema_bounds(schema, param, limits)
        if param.startswith("tools[") and schema.get("type", "object") != "object":
            raise BadRequestError(
                f"{param} must be a JSON schema of type 'object', not {schema.get('type')!r}",
                param=param,
                code="invalid_schema",
            )
    check_forced_size(request, limits)


def _schemas(request: ChatCompletionRequest) -> list[tuple[str, Any]]:
    """The request's JSON schemas with the parameter naming each."""
    out: list[tuple[str, Any]] = [
        (f"tools[{i}].function.parameters", tool.function.parameters)
        for i, tool in enumerate(request.tools or [])
        if tool.function.parameters is not None
    ]
    if request.response_format is not None and request.response_format.json_schema is not None:
        out.append(("response_format.json_schema.schema", request.response_format.json_schema.schema_))
    return out


def _check_schemas(request: ChatCompletionRequest) -> None:
    """Compile every schema of ``request`` (cached): a 400 for one the decoder cannot follow. Off the loop."""
    for param, schema in _schemas(request):
        check_schema(schema, param)


#: The lowest non-zero temperature used, as vLLM's clamp: below it, logits divided by it (and by a
#: small ``repetition_penalty``) overflow float32 and the reported log-probabilities become NaN.
MIN_TEMPERATURE = 0.01
#: The lowest ``repetition_penalty`` accepted, for the same reason.
MIN_REPETITION_PENALTY = 0.01


def _temperature(asked: float | None) -> float:
    if asked is None:
        return 1.0
    return asked if asked == 0 or asked >= MIN_TEMPERATURE else MIN_TEMPERATURE


def sampling_params(request: ChatCompletionRequest, max_tokens: int, vocab_size: int) -> SamplingParams:
    """The engine's sampling settings for ``request`` (vLLM's defaults for the fields not sent).

    Raises:
        BadRequestError: ``min_tokens`` above ``max_tokens`` or a ``logit_bias`` id outside the
            vocabulary (vLLM's checks).
    """
    min_tokens = request.min_tokens or 0
    if min_tokens > max_tokens:
        raise BadRequestError(
            f"min_tokens is {min_tokens} but max_tokens is {max_tokens}: min_tokens must be at most max_tokens",
            param="min_tokens",
        )
    if request.repetition_penalty is not None and request.repetition_penalty < MIN_REPETITION_PENALTY:
        raise BadRequestError(
            f"repetition_penalty is {request.repetition_penalty}; it must be at least {MIN_REPETITION_PENALTY} "
            "(1 is none; below 1 favours repeats)",
            param="repetition_penalty",
        )
    bias = sorted((int(token), value) for token, value in (request.logit_bias or {}).items())
    outside = [token for token, _ in bias if token >= vocab_size]
    if outside:
        raise BadRequestError(
            f"logit_bias names token id(s) {', '.join(map(str, outside))} outside the vocabulary "
            f"(ids 0 to {vocab_size - 1})",
            param="logit_bias",
        )
    return SamplingParams(
        temperature=_temperature(request.temperature),
        top_p=1.0 if request.top_p is None else request.top_p,
        max_tokens=max_tokens,
        seed=request.seed,
        stop=tuple(request.stop or ()),
        top_logprobs=(request.top_logprobs or 0) if request.logprobs else 0,
        top_k=max(request.top_k or 0, 0),
        min_p=request.min_p or 0.0,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
        repetition_penalty=1.0 if request.repetition_penalty is None else request.repetition_penalty,
        min_tokens=min_tokens,
        logit_bias=tuple(bias),
    )


async def prepare_chat(request: ChatCompletionRequest, state: ServerState) -> PreparedChat:
    """Validate ``request`` against the server and build the engine request.

    Everything that needs the server's state (model, tools, schemas, context length) is checked
    here and raised as an :class:`~..errors.APIError` with a readable message.

    Cheap checks and the server's bounds run first; the CPU work (prompt rendering, the length
    bound, schema compilation, tokenisation) runs in a worker thread, so no request holds up
    the event loop (``/health``, other requests' streams).

    The result holds a lease on its adapter (see :class:`~.adapters.AdapterCache`): whoever
    finishes the request gives it back with ``state.adapters.release(prepared.generation.adapter)``.

    Raises:
        APIError: unknown model (404) or any bad input (400), with a message saying what is wrong.
    """
    served = state.registry.resolve(request.model)
    limits = state.config.limits
    _check_request(request, state.config.max_n, limits)
    family = state.family
    tool_parser = get_tool_parser(family.tool_call_parser)
    if request.tools and request.tool_choice != "none" and tool_parser is None:
        raise BadRequestError(
            "this server has no tool-call parser: the model's chat template does not render tools in a syntax "
            "recognised here. Restart it with --chat-template (a template with tool support) and "
            "--tool-call-parser, or send the request without 'tools'",
            param="tools",
        )
    reasoning_parser = get_reasoning_parser(family.reasoning_parser)
    template_kwargs = request.chat_template_kwargs
    context = state.context_length
    prompt = await run_request_work(_prompt, request, state.template, context)
    if _schemas(request):  # compiled in their own bounded pool, so they never hold up rendering
        await run_schema_work(_check_schemas, request)
    constraint = None
    if request.tools or request.response_format is not None:  # rebasing $refs walks the schemas
        constraint = await run_request_work(_constraint, request, tool_parser, reasoning_parser)
    room = context - len(prompt)
    asked = request.max_completion_tokens or request.max_tokens
    if asked is not None and asked > room:
        raise BadRequestError(
            f"the prompt is {len(prompt)} tokens and max_tokens asks for {asked} more, but the model's "
            f"context length is {context}: ask for at most {room} new tokens or shorten the messages",
            param="max_tokens",
            code="context_length_exceeded",
        )
    max_tokens = asked if asked is not None else min(state.config.default_max_tokens, room)
    params = sampling_params(request, max_tokens, len(state.tokenizer))
    _check_output_budget(request.n or 1, params, limits)
    parse_tools = bool(request.tools) and request.tool_choice != "none"
    # Last, once nothing can fail: the lease is given back by whoever finishes the request.
    adapter = await state.adapters.acquire(served)
    generation = GenerationRequest(
        prompt_token_ids=prompt,
        params=params,
        n=request.n or 1,
        adapter=adapter,
        constraint=constraint,
    )
    return PreparedChat(request=request, served=served, generation=generation, parse_tools=parse_tools,
                        tool_names=request.tool_names, tool_parser=tool_parser if parse_tools else None,
                        reasoning_parser=reasoning_parser, chat_template_kwargs=template_kwargs)  # fmt: skip


def _prompt(request: ChatCompletionRequest, template: ChatTemplate, context: int) -> list[int]:
    """The prompt's token ids (worker thread: CPU-bound).

    Cheapest refusal first: a rendered prompt with more characters than the context's tokens
    can hold is refused before any tokeniser work.
    """
    try:
        text = template.render(
            request.messages, request.tools, chat_template_kwargs=request.chat_template_kwargs
        )
    except ChatTemplateError as exc:
        raise BadRequestError(str(exc), param="messages") from exc
    if len(text) >= context * template.max_chars_per_token:
        raise BadRequestError(
            f"the prompt is {len(text)} characters, at least {len(text) // template.max_chars_per_token} "
            f"tokens, but the model's context length is {context}: shorten the messages or tools",
            param="messages",
            code="context_length_exceeded",
        )
    prompt = template.tokenize(text)
    if len(prompt) >= context:
        raise BadRequestError(
            f"the prompt is {len(prompt)} tokens but the model's context length is {context}: "
            "shorten the messages or tools",
            param="messages",
            code="context_length_exceeded",
        )
    return prompt


def _check_output_budget(n: int, params: SamplingParams, limits: ServeLimits) -> None:
    """A 400 when ``n x max_tokens x (1 + top_logprobs)`` is past ``limits.max_request_tokens``."""
    budget = n * params.max_tokens * (1 + params.top_logprobs)
    if budget > limits.max_request_tokens:
        raise BadRequestError(
            f"the request asks for n={n} x max_tokens={params.max_tokens} x (1 + top_logprobs="
            f"{params.top_logprobs}) = {budget} output tokens; this server allows at most "
            f"{limits.max_request_tokens} per request (serve --max-request-tokens): lower n, max_tokens "
            "or top_logprobs",
            param="max_tokens",
        )


def split_reply(text: str, prepared: PreparedChat) -> tuple[str | None, str | None, list[ParsedToolCall]]:
    """The reply's reasoning, content and tool calls.

    The reasoning parser (if the family has one) takes ``<think>...</think>`` off first; tool calls
    are parsed from the rest (only when tools were offered and not turned off).
    """
    reasoning: str | None = None
    content: str | None = text
    if prepared.reasoning_parser is not None:
        reasoning, content = prepared.reasoning_parser.split(text, prepared.chat_template_kwargs)
    if prepared.tool_parser is None or content is None:
        return reasoning, content, []
    parsed = prepared.tool_parser.parse(content, prepared.tool_names)
    return reasoning, parsed.content, parsed.tool_calls


def choice_body(sequence: GeneratedSequence, prepared: PreparedChat, state: ServerState) -> dict[str, Any]:
    """One OpenAI ``choices`` entry for a finished sequence."""
    reasoning, content, calls = split_reply(sequence.text, prepared)
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if prepared.reasoning_parser is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [call.to_openai() for call in calls]
    logprobs = None
    if prepared.want_logprobs:
        entries = state.token_texts.content(sequence.text_token_ids, sequence.logprobs, sequence.top_logprobs)
        logprobs = {"content": entries, "refusal": None}
    return {
        "index": sequence.index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": "tool_calls" if calls else sequence.finish_reason,
    }


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """The OpenAI ``usage`` object; ``prompt_tokens_details.cached_tokens``: prompt tokens served
    from the prefix cache (the most of any choice)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def response_body(
    prepared: PreparedChat, sequences: list[GeneratedSequence], state: ServerState
) -> tuple[dict[str, Any], list[str]]:
    """The ``chat.completion`` body and each choice's finish reason."""
    choices = [choice_body(seq, prepared, state) for seq in sorted(sequences, key=lambda s: s.index)]
    body = {
        "id": prepared.completion_id,
        "object": "chat.completion",
        "created": prepared.created,
        "model": prepared.served.version,  # name@step: the checkpoint that answered, as OpenAI names a snapshot
        "choices": choices,
        "usage": usage_body(
            len(prepared.generation.prompt_token_ids),
            sum(len(s.token_ids) for s in sequences),
            max((s.cached_tokens for s in sequences), default=0),
        ),
        "system_fingerprint": None,
    }
    return body, [c["finish_reason"] for c in choices]


def make_record(
    prepared: PreparedChat,
    choices: list[ChoiceRecord],
    state: ServerState,
    *,
    stream: bool,
) -> CompletionRecord:
    """The exact-token record of a finished completion."""
    params = prepared.generation.params
    return CompletionRecord(
        id=prepared.completion_id,
        model=prepared.request.model,
        base_model=state.config.base_model,
        trained_model=prepared.served.trained_model,
        step=prepared.served.step,
        created=prepared.created,
        prompt_token_ids=list(prepared.generation.prompt_token_ids),
        temperature=params.temperature,
        top_p=params.top_p,
        max_tokens=params.max_tokens,
        seed=params.seed,
        stop=list(params.stop),
        n=prepared.generation.n,
        top_logprobs=params.top_logprobs,
        top_k=params.top_k,
        min_p=params.min_p,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        repetition_penalty=params.repetition_penalty,
        min_tokens=params.min_tokens,
        logit_bias=dict(params.logit_bias),
        constrained=prepared.generation.constraint is not None,
        stream=stream,
        choices=sorted(choices, key=lambda c: c.index),
    )


def choice_record(
    sequence: GeneratedSequence, finish_reason: str, tool_call_ids: Sequence[str] = ()
) -> ChoiceRecord:
    """The record of one finished sequence (with the ids of the tool calls returned for it)."""
    return ChoiceRecord(
        tool_call_ids=list(tool_call_ids),
        index=sequence.index,
        completion_token_ids=list(sequence.token_ids),
        logprobs=[float(x) for x in sequence.logprobs],
        top_logprobs=[[(int(t), float(lp)) for t, lp in row] for row in sequence.top_logprobs]
        if sequence.top_logprobs is not None
        else None,
        finish_reason=finish_reason,
        text=sequence.text,
        cached_prompt_tokens=sequence.cached_tokens,
    )
