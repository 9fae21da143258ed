"""Who the backend answers: the DNS-rebinding guard without a key, the bearer scheme with one.

The app is the real ``create_app`` over a state holding only what the ``/art/models`` routes
read (config and registry), driven in process through ``httpx.ASGITransport``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from art_adapters_backend.config import ServeConfig
from art_adapters_backend.http.app import create_app
from art_adapters_backend.http.host_check import host_allowed, origin_allowed
from art_adapters_backend.serving.registry import Registry

BASE = "base-model"
REGISTER = {"name": "agent", "project": "p", "base_model": BASE}


def _app(tmp_path: Path, **config: Any) -> Any:
    state = SimpleNamespace(
        config=ServeConfig(run_dir=tmp_path, base_model=BASE, **config), registry=Registry(tmp_path, BASE)
    )
    return create_app(state)  # type: ignore[arg-type]


async def _post(app: Any, headers: dict[str, str], url: str = "http://127.0.0.1:8000") -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=url) as client:
        return await client.post("/art/models", json=REGISTER, headers=headers)


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:8000", "localhost", "LocalHost:1", "[::1]", "[::1]:8000", "127.0.0.2:80"]
)
async def test_loopback_hosts_are_answered_without_a_key(tmp_path: Path, host: str) -> None:
    response = await _post(_app(tmp_path), {"Host": host})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "localhost.evil:8000", "0.0.0.0:8000",
             "10.0.0.5:8000", "127.0.0.1:80x", "[::1"],
)  # fmt: skip
async def test_a_rebound_host_name_is_refused_without_a_key(tmp_path: Path, host: str) -> None:
    """A page that rebinds its domain to 127.0.0.1 sends its own name as Host: 403, nothing registered."""
    app = _app(tmp_path)
    response = await _post(app, {"Host": host})
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "host_not_allowed" and error["type"] == "permission_error"
    assert "--api-key" in error["message"] and "--allowed-host" in error["message"]
    assert app.state.server.registry.list() == []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        records = await client.get("/art/completions/chatcmpl-x", headers={"Host": host})
    assert records.status_code == 403


@pytest.mark.parametrize("origin", ["http://evil.example", "https://evil.example:443", "null", "file://"])
async def test_a_foreign_browser_origin_is_refused_without_a_key(tmp_path: Path, origin: str) -> None:
    response = await _post(_app(tmp_path), {"Origin": origin})
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "origin_not_allowed"


@pytest.mark.parametrize("origin", ["http://localhost:3000", "http://127.0.0.1:8888", "https://[::1]:1"])
async def test_a_loopback_origin_is_answered(tmp_path: Path, origin: str) -> None:
    response = await _post(_app(tmp_path), {"Origin": origin})
    assert response.status_code == 201, response.text


async def test_allowed_hosts_widen_the_rule(tmp_path: Path) -> None:
    app = _app(tmp_path, allowed_hosts=("backend.lan",))
    assert (await _post(app, {"Host": "backend.lan:8000", "Origin": "http://backend.lan:8000"})).status_code == 201
    assert (await _post(app, {"Host": "other.lan"})).status_code == 403
    anyone = _app(tmp_path / "any", allowed_hosts=("*",))
    assert (await _post(anyone, {"Host": "whatever.example", "Origin": "http://x.example"})).status_code == 201


def test_allowed_hosts_must_be_bare_names(tmp_path: Path) -> None:
    for bad in ("http://x", "x:8000", "", "a b"):
        with pytest.raises(ValueError, match="allowed-host"):
            ServeConfig(run_dir=tmp_path, allowed_hosts=(bad,))


async def test_with_an_api_key_the_key_guards_any_host(tmp_path: Path) -> None:
    app = _app(tmp_path, api_key="k3y")
    assert (await _post(app, {"Host": "evil.example"})).status_code == 401
    response = await _post(app, {"Host": "gpu-box.lan:8000", "Authorization": "Bearer k3y"})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("header", ["Bearer k3y", "bearer k3y", "BEARER k3y", "Bearer  k3y"])
async def test_the_bearer_scheme_is_case_insensitive(tmp_path: Path, header: str) -> None:
    response = await _post(_app(tmp_path, api_key="k3y"), {"Authorization": header})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("header", ["Basic k3y", "bearer K3Y", "k3y", "Bearer k3y2", "Bearerk3y"])
async def test_a_wrong_scheme_or_key_is_still_refused(tmp_path: Path, header: str) -> None:
    response = await _post(_app(tmp_path, api_key="k3y"), {"Authorization": header})
    assert response.status_code == 401


def test_host_and_origin_rules() -> None:
    assert host_allowed("[::1]:8000") and not host_allowed("[::1]x") and not host_allowed(None)
    assert origin_allowed(None) and origin_allowed("http://127.0.0.1:1")
    assert not origin_allowed("http://127.0.0.1:bad") and not origin_allowed("chrome-extension://abc")
