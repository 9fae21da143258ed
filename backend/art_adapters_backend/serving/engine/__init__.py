"""Inference engines behind one interface (:mod:`.base`): the in-process torch engine and vLLM.

The names below load on first use (the engines need torch, or a vLLM server).
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..._lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from .base import GenerationRequest, InferenceEngine, SamplingParams
    from .torch_engine import TorchEngine
    from .vllm_engine import VllmEngine

__all__ = ["GenerationRequest", "InferenceEngine", "SamplingParams", "TorchEngine", "VllmEngine"]

__getattr__, __dir__ = _lazy_exports(__name__)
