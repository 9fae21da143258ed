"""Model serving, without HTTP: chat requests rendered with the model family's template, decoded by an
engine (:mod:`.engine`), parsed (tool calls, reasoning) and recorded token for token; the model registry,
the LoRA adapters the engine holds, the Responses API on the chat path, and checkpoint export.

Imports no web framework and nothing of :mod:`..http` or :mod:`..training`. The names below (what
the process modules, the applications and ``bench/`` use) load on first use.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from .adapters import AdapterCache
    from .chat_template import ChatTemplate
    from .export import EXPORT_MANIFEST, export_checkpoint, parse_model_ref
    from .model_family import (
        CHAT_TEMPLATE_FILE,
        ModelFamily,
        bundled_chat_template_path,
        resolve_model_family,
        write_serving_settings,
    )
    from .records import RecordStore
    from .registry import Registry
    from .token_text import TokenTexts

__all__ = [
    "AdapterCache",
    "CHAT_TEMPLATE_FILE",
    "ChatTemplate",
    "EXPORT_MANIFEST",
    "ModelFamily",
    "RecordStore",
    "Registry",
    "TokenTexts",
    "bundled_chat_template_path",
    "export_checkpoint",
    "parse_model_ref",
    "resolve_model_family",
    "write_serving_settings",
]

__getattr__, __dir__ = _lazy_exports(__name__)
