"""LangChain's standard chat-model integration tests (``langchain-tests``) on the bundled model.

The suite (:mod:`tests.helpers.langchain_standard`) runs twice over the bundled 135M model on the
session's shared backend: on chat completions and on the Responses API (``use_responses_api=True``).
What the 135M model fails for lack of a capability is an xfail naming it, on both paths.
"""

from __future__ import annotations

import pytest

from art_adapters import LocalBackend, TrainableModel
from tests.helpers.langchain_standard import StandardSuite

pytestmark = pytest.mark.slow

#: Standard tests the bundled 135M base model fails for lack of a capability (not a bug of ours):
#: test name -> (reason, strict). Measured on both paths; the JSON joke ends near the 48-token budget,
#: so whether it is whole can differ between the paths (the second one's prompt is prefix-cached).
TOOL_USE = "capability: the 135M base model does not choose to call a tool unforced (auto tool_choice)"
UNICODE = (
    "capability (unconfirmed): the 135M base model does not copy the Unicode text into the call's arguments"
)
JOKE = "capability: the 135M base model's JSON joke (setup and punchline) is not whole within 48 tokens"
CAPABILITY_XFAILS = {
    "test_agent_loop": (TOOL_USE, True),
    "test_unicode_tool_call_integration": (UNICODE, False),
    "test_structured_output": (JOKE, False),
    "test_structured_output_async": (JOKE, False),
    "test_structured_output_pydantic_2_v1": (JOKE, False),
    "test_structured_output_optional_param": (JOKE, False),
}


@pytest.fixture(scope="module")
async def art_model(local_backend: LocalBackend) -> TrainableModel:
    """One registered model on the session's shared real backend (the bundled model, step 0)."""
    model = TrainableModel(name="langchain-standard", project="tests")
    await model.register(local_backend)
    return model


class TestChatCompletions(StandardSuite):
    """POST /v1/chat/completions."""

    capability_xfails = CAPABILITY_XFAILS


class TestResponses(StandardSuite):
    """POST /v1/responses."""

    use_responses_api = True
    capability_xfails = CAPABILITY_XFAILS
