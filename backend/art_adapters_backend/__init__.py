"""The art-adapters backend: serves models over the OpenAI API and trains LoRA adapters.

Import name ``art_adapters_backend`` (its source lives in the repository's ``backend/``
folder), so it never collides with a user's own ``backend`` package. The client package
``art_adapters`` never imports this one; they talk HTTP.
"""

__all__: list[str] = []
