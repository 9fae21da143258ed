"""Third-party LangChain instrumentations (OpenInference, OpenLLMetry) set up and taken down cleanly.

OpenLLMetry's ``uninstrument()`` (opentelemetry-instrumentation-langchain) removes none of its
wrappers (``BaseCallbackManager.__init__``, ``Pregel.stream``/``astream``, ``Command.__init__``,
the ``AgentMiddleware`` hooks): its ``unwrap(module, "Class.method")`` calls do not reach the class
attributes. Stale wrappers keep making their own spans current in every later test on the pytest
worker, so other instrumentations' spans there get a parent that is never exported (the live
Phoenix import then found no trace). :func:`instrumented_with` takes them off with OTel's own
``unwrap`` on each class.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

#: Where LangChain instrumentations put their wrappers: (module, class).
WRAPPED_CLASSES = (
    ("langchain_core.callbacks.base", "BaseCallbackManager"),
    ("langgraph.pregel", "Pregel"),
    ("langgraph.types", "Command"),
    ("langchain.agents.middleware.types", "AgentMiddleware"),
)


#: What the official OTel GenAI instrumentation needs to record message content on its spans
#: (``opentelemetry-util-genai``: without it spans carry no messages, so nothing can be assembled).
OTEL_GENAI_CONTENT = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
                      "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}  # fmt: skip


def instrumentor(name: str) -> Any:
    """A fresh instrumentor: ``"openinference"``, ``"openllmetry"`` or ``"otel-genai"`` (the official
    ``opentelemetry-instrumentation-genai-langchain``); skips when not installed."""
    if name == "otel-genai":
        module = pytest.importorskip(
            "opentelemetry.instrumentation.genai.langchain",
            reason="opentelemetry-instrumentation-genai-langchain is not installed",
        )
        return module.LangChainInstrumentor()
    if name == "openinference":
        module = pytest.importorskip(
            "openinference.instrumentation.langchain",
            reason="openinference-instrumentation-langchain is not installed",
        )
        return module.LangChainInstrumentor()
    module = pytest.importorskip(
        "opentelemetry.instrumentation.langchain",
        reason="opentelemetry-instrumentation-langchain (OpenLLMetry) is not installed",
    )
    return module.LangchainInstrumentor()


def wrapped_attributes() -> set[tuple[type, str]]:
    """The (class, attribute) pairs of :data:`WRAPPED_CLASSES` that a wrapt wrapper replaces now."""
    found = set()
    for module_name, class_name in WRAPPED_CLASSES:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        found |= {(cls, n) for n, v in vars(cls).items() if type(v).__name__.endswith("FunctionWrapper")}
    return found


@contextmanager
def instrumented_with(name: str, tracer_provider: Any) -> Iterator[None]:
    """LangChain instrumented by ``name`` on ``tracer_provider``; afterwards every wrapper it added is gone."""
    from opentelemetry.instrumentation.utils import unwrap

    saved = {key: os.environ.get(key) for key in OTEL_GENAI_CONTENT}
    if name == "otel-genai":
        os.environ.update(OTEL_GENAI_CONTENT)
    chosen = instrumentor(name)
    if chosen.is_instrumented_by_opentelemetry:  # left on by an earlier test on this worker: to our provider
        chosen.uninstrument()
    before = wrapped_attributes()
    chosen.instrument(tracer_provider=tracer_provider)
    try:
        yield
    finally:
        chosen.uninstrument()
        for cls, attribute in wrapped_attributes() - before:
            unwrap(cls, attribute)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
