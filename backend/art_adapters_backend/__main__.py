"""``python -m art_adapters_backend serve ...``: the backend's own command line (what LocalBackend starts)."""

from __future__ import annotations

from art_adapters_backend.cli import app


def main() -> None:
    """Run the backend's command line under this module's name."""
    app(prog_name="python -m art_adapters_backend")


if __name__ == "__main__":
    main()
