"""``python -m art_adapters_backend serve ...``: the same command line as ``art-adapters``."""

from __future__ import annotations

from art_adapters.apps import app


def main() -> None:
    """Run the ``art-adapters`` command line under this module's name."""
    app(prog_name="python -m art_adapters_backend")


if __name__ == "__main__":
    main()
