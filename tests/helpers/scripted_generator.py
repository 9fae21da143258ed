"""A scenario writer for tests: a LangChain chat model that answers from a script and records its prompts."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field


class ScriptedGenerator(BaseChatModel):
    """Answers each call with the next scripted reply; records every prompt.

    A reply is the answer's text, an exception to raise, or ``("cut", text)``: an answer
    stopped at the token limit (``finish_reason`` ``"length"``).
    """

    script: list[Any]
    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-generator"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.prompts.append("\n".join(str(m.content) for m in messages))
        if not self.script:
            raise AssertionError("the generator was called more often than scripted")
        reply = self.script.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        reason = "stop"
        if isinstance(reply, tuple):
            reason, reply = "length", reply[1]
        message = AIMessage(content=reply)
        return ChatResult(generations=[ChatGeneration(message=message, generation_info={"finish_reason": reason})])
