"""Model serving without HTTP: chat rendering and parsing, records, the registry, export, the engines."""

__all__: list[str] = []
