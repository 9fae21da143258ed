"""The HTTP edge: the FastAPI app, its routes and middleware, admission and server-sent events."""

__all__: list[str] = []
