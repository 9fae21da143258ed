"""The art-adapters backend: serves models over the OpenAI API and trains LoRA adapters.

Import name ``art_adapters_backend`` (source in the repository's ``backend/`` folder), so it never
collides with a user's own ``backend`` package; the client ``art_adapters`` never imports it (they
talk HTTP). Three wings: :mod:`.http` (the HTTP edge) over :mod:`.serving` and :mod:`.training`, over
shared modules (``errors``, ``limits``, ``bundled``...); ``cli``, ``serve`` and ``state`` assemble
them (``docs/structure.md``). The names below load on first use: importing the package is light.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from .config import ServeConfig
    from .errors import APIError
    from .limits import ServeLimits
    from .serve import run_server
    from .state import ServerState

__all__ = ["APIError", "ServeConfig", "ServeLimits", "ServerState", "run_server"]

__getattr__, __dir__ = _lazy_exports(__name__)
