"""Reading a file that holds one JSON value or JSON Lines, as trace exports do."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from art_adapters._errors import ConfigError

__all__ = ["json_values"]


def json_values(source: str | os.PathLike[str], what: str) -> list[Any]:
    """The values in ``source``: its one JSON value (a list's items), else one per non-blank line.

    Raises:
        ConfigError: no such file (named as ``what``), or a line that is not JSON (``path:line``).
    """
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"no such {what} file: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        pass
    else:
        return parsed if isinstance(parsed, list) else [parsed]
    values = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{number}: not JSON: {exc}") from exc
    return values
