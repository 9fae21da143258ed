"""Ids the client puts into URL paths are quoted: an id can never change the route it is sent to."""

from __future__ import annotations

import httpx
import pytest

from art_adapters import RemoteBackend, TrainableModel
from art_adapters._backends import path_segment


@pytest.mark.parametrize(
    ("value", "quoted"),
    [("agent", "agent"), ("a/b", "a%2Fb"), ("..", "%2E%2E"), (".", "%2E"), ("x?y#z", "x%3Fy%23z"),
     ("50%", "50%25"), ("a b", "a%20b")],
)  # fmt: skip
def test_path_segment(value: str, quoted: str) -> None:
    assert path_segment(value) == quoted


async def test_ids_are_quoted_in_every_path() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        if request.url.raw_path.endswith(b"/checkpoints"):
            return httpx.Response(200, json={"data": []})
        if request.url.raw_path.endswith(b"/delete"):
            return httpx.Response(200, json={"deleted": []})
        return httpx.Response(200, json={"path": "/x", "latest_step": 0})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        backend = RemoteBackend("http://127.0.0.1:9", http_client=http)
        await backend.get_model("../../health")
        await backend.get_token_record("chatcmpl-1/../../models?x=1#f")
        await backend.export_model("a/b", out="/tmp/out")
        model = TrainableModel(name="agent")
        model._backend = backend
        await model.checkpoints()
        await model.delete_checkpoints([1])
    assert seen == [
        "/art/models/..%2F..%2Fhealth",
        "/art/completions/chatcmpl-1%2F..%2F..%2Fmodels%3Fx%3D1%23f",
        "/art/models/a%2Fb/export",
        "/art/models/agent/checkpoints",
        "/art/models/agent/checkpoints/delete",
    ]
