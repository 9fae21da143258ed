"""The commands' shared pieces: options from config models (:mod:`art_adapters.cli_options`, shared
with the backend's ``serve``), quiet HTTP logs, and errors printed as one red line.
"""

from __future__ import annotations

import logging

from art_adapters.cli_options import Setting, build_config, config_command, exit_on, field_help

__all__ = ["Setting", "build_config", "config_command", "exit_on", "field_help", "quiet_http_logs"]


def quiet_http_logs() -> None:
    """One log line per HTTP request (httpx, the mcp SDK's streamable-HTTP client) drowns the progress
    lines (unless --verbose)."""
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        for name in ("httpx", "httpx2", "mcp"):
            logging.getLogger(name).setLevel(logging.WARNING)
