"""generate_scenarios keeps every valid scenario: saved as accepted and reused, kept in the error, salvaged
from answers cut at the token limit (json_schema mode too), with a prompt fitted to the generator's context
and tool names caught in any naming style (plain English words of a name are not one).

Real components: the bundled notes server over stdio, ``ChatOpenAI`` against a scripted OpenAI-compatible
HTTP server (so the OpenAI SDK raises its real ``LengthFinishReasonError``), and a scripted chat model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

import mcp_tools
from art_adapters._errors import ConfigError
from mcp_tools import ScenarioGenerationError, generate_scenarios, load_scenarios
from mcp_tools._answers import named_tool
from mcp_tools._generate import SYSTEM_PROMPT, describe_tools
from mcp_tools.servers import server_command
from tests.helpers.json_server import QuietHandler, serve_in_thread
from tests.helpers.scripted_generator import ScriptedGenerator as Scripted

TOOLS = [
    {"name": "search_notes", "description": "Find notes containing words.", "inputSchema": {"type": "object"}},
    {"name": "create_note", "description": "Create a note.", "inputSchema": {"type": "object"}},
]
TASKS = [
    "Find the note about my Lisbon hotel booking",
    "Add a reminder to call the plumber on Friday",
    "What did Priya and I decide about the garden party?",
    "Which of my notes mention the car service?",
]


def answer(*tasks: str, difficulty: int = 2) -> str:
    return json.dumps({"scenarios": [{"task": t, "difficulty": difficulty} for t in tasks]})


class OpenAIStub:
    """A scripted OpenAI-compatible server: ``/v1/models`` (with ``max_model_len``) and chat completions.

    A script entry is ``{"content": ..., "finish_reason": "length"}`` or ``{"status": 400, "code": ...}``.
    """

    def __init__(self, max_model_len: int | None = None) -> None:
        self.script: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.max_model_len = max_model_len
        stub = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                entry: dict[str, Any] = {"id": "gen", "object": "model", "created": 0, "owned_by": "stub"}
                if stub.max_model_len is not None:
                    entry["max_model_len"] = stub.max_model_len
                self.send_json(200, {"object": "list", "data": [entry]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                stub.requests.append(body)
                entry = stub.script.pop(0)
                if entry.get("status", 200) != 200:
                    error = {"message": entry.get("message", "scripted failure"), "type": "invalid_request_error"}
                    self.send_json(entry["status"], {"error": {**error, "code": entry.get("code")}})
                    return
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": entry["content"]},
                    "finish_reason": entry.get("finish_reason", "stop"),
                }
                self.send_json(200, {
                    "id": f"chatcmpl-{len(stub.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": "gen", "choices": [choice],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })  # fmt: skip

        self._httpd = serve_in_thread(Handler, "openai-stub")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def model(self, **kwargs: Any) -> ChatOpenAI:
        return ChatOpenAI(base_url=self.url, api_key="test", model="gen", max_retries=0, **kwargs)

    def prompt(self, index: int) -> str:
        return "\n".join(str(m["content"]) for m in self.requests[index]["messages"])

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    server = OpenAIStub()
    try:
        yield server
    finally:
        server.close()


async def test_accepted_scenarios_are_saved_as_they_come_and_the_error_keeps_them(tmp_path: Path) -> None:
    file = tmp_path / "run" / "scenarios.jsonl"
    on_disk: list[int] = []
    model = Scripted(script=[answer(*TASKS[:2], "Use search_notes to find pancakes"), "not JSON", "{oops"])
    with pytest.raises(ScenarioGenerationError) as info:
        await generate_scenarios(
            TOOLS, n=3, model=model, max_retries=1, save_to=file,
            on_accept=lambda s: on_disk.append(len(load_scenarios(file))),
        )  # fmt: skip
    assert on_disk == [1, 2]  # each one was in the file before the next was accepted
    assert not model.script  # a call that kept two (no retry used), an empty one, then max_retries=1 retry
    assert "- Use search_notes to find pancakes (names a tool)" in model.prompts[1]  # a retry differs
    error = info.value
    assert [s.task for s in error.scenarios] == TASKS[:2] and error.saved_to == file
    message = str(error)
    assert "wrote 2 of 3 valid distinct scenarios in 3 call(s)" in message
    assert f"saved in {file}" in message and "only the missing 1" in message
    assert [s.task for s in load_scenarios(file)] == TASKS[:2]

    # the next run reuses them and asks only for the missing one
    model = Scripted(script=[answer(TASKS[2])])
    scenarios = await generate_scenarios(TOOLS, n=3, model=model, save_to=file)
    assert [s.task for s in scenarios] == TASKS[:3]
    assert "Write 1 new task (" in model.prompts[0] and f"- {TASKS[0]}" in model.prompts[0]
    assert load_scenarios(file) == scenarios

    # a file that already holds n scenarios needs no call at all
    assert await generate_scenarios(TOOLS, n=2, model=Scripted(script=[]), save_to=file) == scenarios[:2]


async def test_without_save_to_the_error_still_carries_what_was_accepted() -> None:
    model = Scripted(script=[answer(TASKS[0]), "nope"])
    with pytest.raises(ScenarioGenerationError, match=r"1 of 2 .* in this error's \.scenarios") as info:
        await generate_scenarios(TOOLS, n=2, model=model, max_retries=1)
    assert [s.task for s in info.value.scenarios] == [TASKS[0]] and info.value.saved_to is None


async def test_a_cut_answer_in_json_schema_mode_keeps_its_complete_items(stub: OpenAIStub) -> None:
    cut = answer(*TASKS[:2])[:-25]  # the second item is cut off
    stub.script = [{"content": cut, "finish_reason": "length"}, {"content": answer(TASKS[2])},
                   {"content": answer(TASKS[3])}]  # fmt: skip
    scenarios = await generate_scenarios(TOOLS, n=3, model=stub.model(max_tokens=40), max_retries=0)
    assert [s.task for s in scenarios] == [TASKS[0], TASKS[2], TASKS[3]]
    assert stub.requests[0]["response_format"]["type"] == "json_schema"  # asked with the schema...
    assert "Write 3 new tasks" in stub.prompt(0)
    assert "Write 1 new task (" in stub.prompt(1)  # ...and after the cut, for as many as it completed
    assert "Write 1 new task (" in stub.prompt(2)


async def test_a_cut_plain_answer_keeps_its_complete_items_and_asks_for_fewer() -> None:
    model = Scripted(script=[("cut", answer(*TASKS[:3])[:-30]), answer(TASKS[3]), answer("Show my notes tagged work")])
    scenarios = await generate_scenarios(TOOLS, n=4, model=model, structured=False, max_retries=1)
    assert [s.task for s in scenarios] == [TASKS[0], TASKS[1], TASKS[3], "Show my notes tagged work"]
    assert "Write 4 new tasks" in model.prompts[0] and "Write 2 new tasks" in model.prompts[1]
    assert "Write 1 new task (" in model.prompts[2]


async def test_an_endpoint_saying_the_prompt_is_too_long_fails_at_once(stub: OpenAIStub) -> None:
    stub.script = [{"status": 400, "code": "context_length_exceeded", "message": "too many tokens"}] * 3
    with pytest.raises(ScenarioGenerationError, match="does not fit the generator's context.*context_tokens="):
        await generate_scenarios(TOOLS, n=2, model=stub.model(), max_retries=2)
    assert len(stub.requests) == 1  # neither asked plainly nor retried


def _big_resources() -> list[dict[str, Any]]:
    return [
        {"name": f"notebook-{i}", "description": f"Notebook {i}", "text": f"entry {i} " * 400} for i in range(3)
    ]


async def test_resources_are_trimmed_to_the_context_and_tools_always_fit() -> None:
    tools = await mcp_tools.load_tools(server_command("notes"))  # the real server's tools
    tools_text = describe_tools(tools)
    answer_tokens = 100
    context = (len(SYSTEM_PROMPT) + len(tools_text) + 1500) // 3 + answer_tokens + 32
    model = Scripted(script=[answer(TASKS[0])])
    object.__setattr__(model, "max_tokens", answer_tokens)  # the answer's reserve, as ChatOpenAI has it
    await generate_scenarios(tools, n=1, model=model, resources=_big_resources(), context_tokens=context)
    prompt = model.prompts[0]
    assert tools_text in prompt  # every tool, whole
    assert "- notebook-0: Notebook 0" in prompt and " ..." in prompt  # the first resource, cut
    assert "more resources not shown" in prompt or "- notebook-2" not in prompt
    assert len(prompt) // 3 + answer_tokens + 32 <= context  # the estimate stays within the context


async def test_the_context_length_comes_from_the_endpoint_model_list(stub: OpenAIStub) -> None:
    stub.max_model_len = (len(SYSTEM_PROMPT) + len(describe_tools(TOOLS)) + 900) // 3 + 100 + 32
    stub.script = [{"content": answer(TASKS[0])}]
    await generate_scenarios(TOOLS, n=1, model=stub.model(max_tokens=100), resources=_big_resources())
    prompt = stub.prompt(0)
    assert "notebook-0" in prompt and "notebook-1" not in prompt and len(prompt) < 3 * stub.max_model_len
    stub.max_model_len = None  # unknown: a fixed cap on the resources (8000 characters)
    stub.script = [{"content": answer(TASKS[1])}]
    await generate_scenarios(TOOLS, n=1, model=stub.model(max_tokens=100), resources=_big_resources())
    assert "notebook-2" in stub.prompt(1) and len(stub.prompt(1)) < len(SYSTEM_PROMPT) + 9000


async def test_tools_that_alone_do_not_fit_are_a_clear_error() -> None:
    model = Scripted(script=[])
    with pytest.raises(ConfigError, match=r"the 6 tool descriptions alone need about \d+ tokens.*context_tokens="):
        await generate_scenarios(server_command("notes"), n=2, model=model, context_tokens=300)
    assert not model.prompts  # nothing was sent


@pytest.mark.parametrize(
    ("name", "task"),
    [
        ("read-file", "Please use read file on notes.txt and tell me what it says"),
        ("read-file", "Call read-file on my notes"),
        ("list_directory", "Open the list directory tool for my home folder"),
        ("list_directory", "Run listDirectory on the downloads folder"),
        ("readFile", "Use read_file to open the report"),
        ("readFile", "Read the file and read-file it again"),
        ("fs.search_files", "Use fs search files to find my invoices"),
        ("HTTPGet", "Do an HTTPGet of the status page"),
        ("search_notes", "Call the search notes function for pancakes"),
        ("list_notes", "Show my work notes (via list notes)"),
        ("add", "Compute add(2, 3) for me please"),
        ("add", "Use `add` for 2 and 3 please"),
    ],
)
def test_tool_names_in_any_style_are_caught(name: str, task: str) -> None:
    assert named_tool(task, ["other_tool", name]) == name


@pytest.mark.parametrize(
    "task",
    [
        "Add 2 and 3 and then square the result",  # one-word names are ordinary words
        "Read the file I saved yesterday",  # "read ... file", not "read file"
        "List the contents of my home directory",
        # a multi-word name's words written apart, not called a tool, are plain English
        "List directory contents of my home folder",
        "Please read file notes.txt and tell me what it says",
        "List notes tagged work from last week",
        "Search notes for the pancake recipe and read note 3",
        "Use my notes to plan the week",
    ],
)
def test_ordinary_words_are_not_tool_names(task: str) -> None:
    tools = ["add", "read-file", "list_directory", "sqrt", "list_notes", "search_notes", "read_note"]
    assert named_tool(task, tools) is None


async def test_kebab_and_camel_case_tool_names_are_rejected_in_generation() -> None:
    tools = [
        {"name": "read-file", "description": "Read a file.", "inputSchema": {"type": "object"}},
        {"name": "listDirectory", "description": "List a folder.", "inputSchema": {"type": "object"}},
    ]
    model = Scripted(
        script=[answer("Open read-file on budget.xlsx and sum column B", "Please listDirectory my projects folder",
                       "3. delete_note_by_id_list now", "What is in the budget spreadsheet?",
                       "List directory of my projects folder")]
    )  # fmt: skip
    with pytest.raises(ScenarioGenerationError, match=r"2 names a tool.*1 not a sentence") as info:
        await generate_scenarios(tools, n=3, model=model, max_retries=0)
    assert [s.task for s in info.value.scenarios] == [
        "What is in the budget spreadsheet?",
        "List directory of my projects folder",  # the words of list_directory in plain English
    ]


async def test_train_mcp_generates_only_the_missing_scenarios(tmp_path: Path) -> None:
    from rich.console import Console

    from art_adapters.apps._train_mcp import TrainMcpConfig, _scenarios

    command = " ".join(server_command("notes"))
    config = TrainMcpConfig(server=command, run_dir=tmp_path, n_scenarios=3, max_retries=0)
    tools = await mcp_tools.load_tools(command)
    console = Console(file=open(tmp_path / "console.txt", "w"))  # noqa: SIM115 - closed with the test dir
    first = Scripted(script=[answer(*TASKS[:2], "Use search_notes for pancakes")])
    with pytest.raises(ScenarioGenerationError):
        await _scenarios(config, tools, lambda: first, console)
    assert len(load_scenarios(tmp_path / "scenarios.jsonl")) == 2  # kept on disk
    second = Scripted(script=[answer(TASKS[2])])
    scenarios, path = await _scenarios(config, tools, lambda: second, console)
    assert [s.task for s in scenarios] == TASKS[:3] and load_scenarios(path) == scenarios
    assert "Write 1 new task (" in second.prompts[0]
    console.file.close()
    assert "generating 1 scenarios from the server's tools (2 already in" in (tmp_path / "console.txt").read_text()
