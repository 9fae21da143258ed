"""LangChain's standard chat-model integration tests (``langchain-tests``) on our real backend.

``model.chat_model()`` runs the suite twice over the bundled 135M model: on chat completions and
on the Responses API (``use_responses_api=True``). Generations are kept short; tests the 135M
model fails for lack of a capability are xfailed naming it, the same on both paths.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langchain_tests.integration_tests import ChatModelIntegrationTests

from art_adapters import LocalBackend, TrainableModel

pytestmark = pytest.mark.slow

NAME = "langchain-standard"

#: Standard tests the bundled 135M base model fails for lack of a capability (not a bug of ours).
TOOL_USE = "capability: the 135M base model does not choose to call a tool unforced (auto tool_choice)"
UNICODE_CALL = "capability (unconfirmed): no complete forced call with Unicode arguments within 48 tokens"
STRUCTURED = "capability: the 135M base model does not write the schema's JSON object within the token budget"
CAPABILITY_XFAILS = {
    "test_agent_loop": TOOL_USE,
    "test_unicode_tool_call_integration": UNICODE_CALL,
    "test_structured_output": STRUCTURED,
    "test_structured_output_async": STRUCTURED,
    "test_structured_output_pydantic_2_v1": STRUCTURED,
    "test_structured_output_optional_param": STRUCTURED,
}


@pytest.fixture(scope="module")
async def art_model(local_backend: LocalBackend) -> TrainableModel:
    """One registered model on the shared real backend (the bundled model, step 0)."""
    model = TrainableModel(name=NAME, project="tests")
    await model.register(local_backend)
    return model


class _StandardSuite(ChatModelIntegrationTests):
    """The standard suite with ``model.chat_model(**params)`` as the model under test."""

    use_responses_api = False

    @pytest.fixture(autouse=True)
    def _bind(self, request: pytest.FixtureRequest, art_model: TrainableModel) -> None:
        self._art_model = art_model  # the suite builds its own ChatOpenAI(**chat_model_params) too
        reason = CAPABILITY_XFAILS.get(request.node.originalname)
        if reason:
            request.applymarker(pytest.mark.xfail(reason=reason, strict=False))

    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ChatOpenAI

    @property
    def standard_chat_model_params(self) -> dict[str, Any]:
        # The suite's defaults, with short generations (100 tokens is seconds per call on CPU); 48 fits a forced tool call.
        return {"temperature": 0, "max_tokens": 48, "timeout": 60, "stop": [], "max_retries": 0}

    @property
    def chat_model_params(self) -> dict[str, Any]:
        backend = self._art_model.backend
        return {
            "model": self._art_model.served_name(None),
            "base_url": backend.openai_base_url,
            "api_key": backend.api_key or "not-needed",
            "use_responses_api": self.use_responses_api,
            # ChatOpenAI asks a non-OpenAI base URL for streamed usage only when told to.
            "stream_usage": True,
        }

    @property
    def model_override_value(self) -> str:
        return f"{NAME}@0"  # the same checkpoint pinned by step: the backend echoes the name asked for

    @pytest.fixture
    def model(self, request: pytest.FixtureRequest, art_model: TrainableModel) -> BaseChatModel:
        params = {**self.standard_chat_model_params, **self.chat_model_params, **(getattr(request, "param", None) or {})}
        for key in ("model", "base_url", "api_key"):
            del params[key]  # chat_model() sets these
        return art_model.chat_model(**params)


class TestChatCompletions(_StandardSuite):
    """POST /v1/chat/completions."""


class TestResponses(_StandardSuite):
    """POST /v1/responses."""

    use_responses_api = True
