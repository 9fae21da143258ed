"""LangChain's standard chat-model integration suite (``langchain-tests``) on a model of our backend.

:class:`StandardSuite` runs ``ChatModelIntegrationTests`` against ``model.chat_model()``, on chat
completions or on the Responses API. A test module subclasses it, provides an ``art_model`` fixture
(a registered :class:`TrainableModel`) and names its capability xfails. Each test gets the fewest
tokens its assertions need (:data:`TOKEN_BUDGETS`), so a run takes seconds per test on CPU.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langchain_tests.integration_tests import ChatModelIntegrationTests

from art_adapters import TrainableModel

#: Tokens a reply may take where the test needs only some text, a stop sequence or a usage count.
TEXT_TOKENS = 8
#: Tokens for the tests that need a whole tool call or JSON object: 48 fit the bundled model's forced
#: calls (24 cut ``test_tool_choice`` short). Constrained replies end when the call or object is complete.
CALL_TOKENS = 48
TOKEN_BUDGETS = dict.fromkeys(
    (
        "test_tool_calling",
        "test_tool_calling_async",
        "test_bind_runnables_as_tools",
        "test_tool_choice",
        "test_tool_calling_with_no_arguments",
        "test_structured_few_shot_examples",
        "test_structured_output",
        "test_structured_output_async",
        "test_structured_output_pydantic_2_v1",
        "test_structured_output_optional_param",
        "test_agent_loop",
        "test_unicode_tool_call_integration",
    ),
    CALL_TOKENS,
)
#: Seconds a request may take: a bound on a hung request, with room for 48 tokens on a loaded machine.
TIMEOUT_S = 120


class StandardSuite(ChatModelIntegrationTests):
    """The standard suite with ``art_model.chat_model(**params)`` as the model under test.

    Subclasses set :attr:`use_responses_api` and :attr:`capability_xfails` (test name -> ``(reason,
    strict)``, applied as xfails), and the module provides the ``art_model`` fixture.
    """

    use_responses_api: ClassVar[bool] = False
    capability_xfails: ClassVar[dict[str, tuple[str, bool]]] = {}

    @pytest.fixture(autouse=True)
    def _bind(self, request: pytest.FixtureRequest, art_model: TrainableModel) -> None:
        # Autouse, so it runs before ``model``: the suite builds its own ChatOpenAI(**chat_model_params) too.
        name = request.node.originalname
        self._art_model = art_model
        self._max_tokens = TOKEN_BUDGETS.get(name, TEXT_TOKENS)
        if name in self.capability_xfails:
            reason, strict = self.capability_xfails[name]
            request.applymarker(pytest.mark.xfail(reason=reason, strict=strict))

    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        """ChatOpenAI: what ``TrainableModel.chat_model`` returns."""
        return ChatOpenAI

    @property
    def standard_chat_model_params(self) -> dict[str, Any]:
        """The suite's defaults (greedy, no retries) with a short timeout."""
        return {"temperature": 0, "timeout": TIMEOUT_S, "stop": [], "max_retries": 0}

    @property
    def chat_model_params(self) -> dict[str, Any]:
        """The backend's URL and the model's served name, and this test's token budget."""
        backend = self._art_model.backend
        return {
            "model": self._art_model.served_name(None),
            "base_url": backend.openai_base_url,
            "api_key": backend.api_key or "not-needed",
            "use_responses_api": self.use_responses_api,
            # Here too, not only in the standard params: tests that build their own model use only these.
            "max_tokens": self._max_tokens,
            "timeout": TIMEOUT_S,
            "max_retries": 0,
            # ChatOpenAI asks a non-OpenAI base URL for streamed usage only when told to.
            "stream_usage": True,
        }

    @property
    def model_override_value(self) -> str:
        """The same checkpoint pinned by step (``name@0``): the backend echoes the name asked for."""
        return self._art_model.served_name(0)

    @pytest.fixture
    def model(self, request: pytest.FixtureRequest, art_model: TrainableModel) -> BaseChatModel:
        """``art_model.chat_model()`` with the suite's parameters and a test's own (``output_version``)."""
        extra = getattr(request, "param", None) or {}
        params = {**self.standard_chat_model_params, **self.chat_model_params, **extra}
        for key in ("model", "base_url", "api_key"):
            del params[key]  # chat_model() sets these
        return art_model.chat_model(**params)
