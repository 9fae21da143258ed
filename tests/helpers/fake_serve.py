"""``python -m tests.helpers.fake_serve serve [flags]``: the backend's own ``serve`` command on the fake engine.

The command line, ``run_server`` (umask, exit codes) and ``serve`` (port file, parent watch, SIGTERM,
closing the stores) are the backend's; only the engine and trainer are
:class:`~tests.helpers.fake_engine.FakeEngine` and :class:`~tests.helpers.fake_trainer.FakeTrainer`,
passed through ``serve``'s ``engine_factory``/``trainer_factory`` seam. :class:`FakeLocalBackend` is a
``LocalBackend`` that starts this module instead of ``art_adapters_backend``: for tests of a server
process of their own (restart, kill, a full disk, an API key) whose subject is not the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from art_adapters import LocalBackend

__all__ = ["FakeLocalBackend", "main"]

#: The repository root, put on the subprocess's ``PYTHONPATH`` so it finds ``tests.helpers``.
ROOT = Path(__file__).resolve().parents[2]


class FakeLocalBackend(LocalBackend):
    """``LocalBackend`` whose subprocess serves the real app on the fake engine (same flags, same lifecycle)."""

    def _command(self, port_file: Path) -> list[str]:
        command = super()._command(port_file)
        at = command.index("art_adapters_backend")
        return [*command[:at], "tests.helpers.fake_serve", *command[at + 1 :]]

    def _environment(self) -> dict[str, str]:
        env = super()._environment()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        return env


def main() -> None:
    """Run the backend's command line with ``serve`` bound to the fake engine and trainer."""
    import art_adapters_backend.serve as serve_module
    from art_adapters_backend.cli import app

    from .fake_engine import FakeEngine
    from .fake_trainer import FakeTrainer

    real_serve = serve_module.serve

    async def fake_serve(config: Any) -> None:
        await real_serve(config, engine_factory=FakeEngine.for_model, trainer_factory=FakeTrainer)

    serve_module.serve = fake_serve  # run_server calls it by its module-level name
    app(prog_name="python -m tests.helpers.fake_serve")


if __name__ == "__main__":
    main()
