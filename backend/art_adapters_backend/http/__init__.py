"""The HTTP edge: the FastAPI app and its routes, the middleware (API key, Host/Origin check, body
limit, quiet-time memory return), admission, server-sent events, and the backend's errors as responses.

The only wing that imports FastAPI or Starlette. It calls into :mod:`..serving` and :mod:`..training`;
they never import it. The names below load on first use.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if _TYPE_CHECKING:
    from .admission import AdmissionGate
    from .app import create_app
    from .error_handlers import error_response, install_error_handlers

__all__ = ["AdmissionGate", "create_app", "error_response", "install_error_handlers"]

__getattr__, __dir__ = _lazy_exports(__name__)
