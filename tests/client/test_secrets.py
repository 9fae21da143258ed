"""Secrets stay secret: no API key on a command line or in a log line, no keys in config reprs or errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from art_adapters import LocalBackend
from art_adapters._backends import redact_command
from art_adapters._redact import redact_text, redact_url
from art_adapters.observe._config import ObserveConfig

KEY = "s3cret-key-123"


@pytest.mark.slow
def test_local_backend_passes_its_key_by_environment(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path, api_key=KEY, extra_args=["--max-n", "4"])
    command = backend._command(tmp_path / "port")
    assert KEY not in " ".join(command) and "--api-key" not in command
    assert command[-2:] == ["--max-n", "4"] and "--parent-pid" in command
    assert backend._environment()["ART_ADAPTERS_API_KEY"] == KEY


@pytest.mark.slow
def test_local_backend_without_a_key_does_not_inherit_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key in the user's environment would make the child demand a key this client never sends."""
    monkeypatch.setenv("ART_ADAPTERS_API_KEY", "from-the-shell")
    assert "ART_ADAPTERS_API_KEY" not in LocalBackend(tmp_path)._environment()


def test_logged_command_lines_hide_keys() -> None:
    assert redact_command(["serve", "--api-key", KEY, "--api-key=" + KEY, "--port", "1"]) == [
        "serve", "--api-key", "***", "--api-key=***", "--port", "1",
    ]  # fmt: skip


def test_observe_config_repr_hides_secrets() -> None:
    config = ObserveConfig(
        langfuse_public_key="pk-lf-1", langfuse_secret_key=KEY, otlp_headers={"Authorization": f"Bearer {KEY}"}
    )
    assert KEY not in repr(config) and KEY not in str(config)
    assert isinstance(config.langfuse_secret_key, SecretStr) and config.langfuse
    assert config.langfuse_secret_key.get_secret_value() == KEY
    assert config.otlp_headers == {"Authorization": f"Bearer {KEY}"}  # still usable as given
    assert config.langfuse_headers()["Authorization"].startswith("Basic ")


@pytest.mark.parametrize(
    "bad",
    [{"export_timeout_s": -1}, {"otlp_endpoint": f"ftp://user:{KEY}@collector/v1/traces"}, {"langfuse_public_key": None}],
)
def test_observe_config_errors_do_not_echo_secrets(bad: dict[str, object]) -> None:
    settings: dict[str, object] = {"langfuse_public_key": "pk-lf-1", "langfuse_secret_key": KEY,
                                   "otlp_headers": {"Authorization": KEY}, **bad}  # fmt: skip
    with pytest.raises(ValueError) as raised:
        ObserveConfig(**settings)  # type: ignore[arg-type]
    assert KEY not in str(raised.value)
    environ = {"LANGFUSE_PUBLIC_KEY": "pk-lf-1", "LANGFUSE_SECRET_KEY": KEY, "OTEL_EXPORTER_OTLP_HEADERS": f"a={KEY}"}
    with pytest.raises(ValueError) as from_env:
        ObserveConfig.from_env(environ, export_timeout_s=-1)
    assert KEY not in str(from_env.value)


def test_redact_url_and_text() -> None:
    assert redact_url(f"https://user:{KEY}@host:8443/v1?api-version=1&api-key={KEY}") == (
        "https://host:8443/v1?api-version=1&api-key=***"
    )
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert redact_text(f"ConnectError for url 'https://u:{KEY}@h/v1/chat'") == "ConnectError for url 'https://h/v1/chat'"

