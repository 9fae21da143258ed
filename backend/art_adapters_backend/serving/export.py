"""Export a trained checkpoint for deployment: a PEFT adapter folder, or a merged model, ready for vLLM.

It works offline on a backend's run directory (the backend need not run), and exports with the chat
template and parsers the run trained with, so what you trained with is what you deploy with.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from art_adapters.files import atomic_directory

from ..bundled import is_bundled, resolve_model_path
from ..errors import BadRequestError
from .model_family import CHAT_TEMPLATE_FILE, SERVING_SETTINGS, ModelFamily
from .registry import ModelRecord, Registry

__all__ = [
    "CHAT_TEMPLATE_FILE",
    "EXPORT_MANIFEST",
    "ExportError",
    "ExportExistsError",
    "ExportNotFoundError",
    "ServingSettings",
    "export_checkpoint",
    "parse_model_ref",
    "read_serving_settings",
    "vllm_serve_command",
]

logger = logging.getLogger(__name__)

#: What was exported, from where, and the vLLM command: written into every export.
EXPORT_MANIFEST = "export.json"
#: The PEFT adapter files copied from a checkpoint (its optimizer state and trainer state stay behind).
_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
#: ``vllm serve --max-lora-rank`` accepts only these values.
_VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
#: ``name[@step]``, matched whole; the step in canonical form (ASCII digits, no sign or leading zero).
_REF = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,127})(?:@(?P<step>0|[1-9][0-9]*))?")


class ExportError(BadRequestError, ValueError):
    """A checkpoint cannot be exported; the message says what to change (a 400)."""


class ExportNotFoundError(ExportError):
    """The run directory, the model or the step does not exist (a 404)."""

    status_code = 404
    code = "checkpoint_not_found"


class ExportExistsError(ExportError):
    """The output folder exists and is not empty (pass ``force=True`` / ``--force`` to replace it; a 409)."""

    status_code = 409
    code = "export_exists"
    param = "out"


@dataclass(frozen=True)
class ServingSettings:
    """How the backend rendered and parsed prompts in a run (``run_dir/serving.json``).

    Attributes:
        base_model: the base model as the backend was started with it (bundled name, folder, Hub id).
        base_model_path: the local folder it resolved to.
        chat_template: the Jinja chat template text every prompt was rendered with.
        chat_template_source: where that template came from (a file, ``"tokenizer"``, ``"inline"``).
        tool_call_parser: vLLM's ``--tool-call-parser`` name, or ``None`` (no tool support).
        reasoning_parser: vLLM's ``--reasoning-parser`` name, or ``None``.
        recorded: ``False`` when ``serving.json`` was missing and these are today's defaults.
    """

    base_model: str
    base_model_path: Path
    chat_template: str
    chat_template_source: str
    tool_call_parser: str | None
    reasoning_parser: str | None
    recorded: bool = True

    def family(self) -> ModelFamily:
        """These settings as the backend's :class:`~.model_family.ModelFamily`."""
        return ModelFamily(
            self.chat_template, self.chat_template_source, self.tool_call_parser, self.reasoning_parser
        )


def parse_model_ref(ref: str) -> tuple[str, int | None]:
    """Split ``"name"`` or ``"name@step"`` into the name and the step (``None``: the latest).

    Raises:
        ExportError: ``ref`` is not a model name with an optional ``@step`` (a number).
    """
    match = _REF.fullmatch(ref)
    if match is None:
        raise ExportError(
            f"{ref!r} is not NAME or NAME@STEP (a registered model's name, optionally '@' and a step "
            "number, e.g. 'agent@3')"
        )
    step = match.group("step")
    return match.group("name"), None if step is None else int(step)


# ------------------------------------------------------------------ reading the run directory


def _load_record(run_dir: Path, name: str) -> ModelRecord:
    registry_file = run_dir / Registry.FILENAME
    if not registry_file.is_file():
        raise ExportNotFoundError(
            f"{run_dir} is not a backend run directory (it has no {Registry.FILENAME}); pass the "
            "--run-dir the backend was started with"
        )
    models = json.loads(registry_file.read_text(encoding="utf-8")).get("models", {})
    if name not in models:
        known = ", ".join(sorted(models)) or "none"
        raise ExportNotFoundError(f"model {name!r} is not registered in {run_dir} (registered: {known})")
    return ModelRecord.model_validate(models[name])


def _resolve_step(record: ModelRecord, step: int | None) -> tuple[int, Path | None]:
    """The step to export and its adapter folder (``None`` for step 0, the base weights)."""
    chosen = record.latest_step if step is None else step
    if chosen not in record.checkpoints:
        raise ExportNotFoundError(
            f"model {record.name!r} has no step {chosen}; its steps are {record.steps}"
        )
    raw = record.checkpoints[chosen]
    if raw is None:
        return chosen, None
    folder = Path(raw)
    if not (folder / "adapter_config.json").is_file():
        raise ExportNotFoundError(
            f"checkpoint {record.name}@{chosen} is registered at {folder}, but that folder holds no "
            "adapter_config.json (deleted or moved?)"
        )
    return chosen, folder


def read_serving_settings(
    run_dir: str | os.PathLike[str], base_model: str | None = None, cache_dir: Path | None = None
) -> ServingSettings:
    """The template and parsers a run's backend used (``serving.json`` + ``chat_template.jinja``).

    The backend writes ``run_dir/serving.json`` and ``run_dir/chat_template.jinja`` at every
    start-up. A run directory without them (from an older backend) falls back to the defaults
    a backend would pick for the registered base model today, and the export's README says so.

    Args:
        run_dir: the backend's run directory.
        base_model: the registered base model, used only when ``serving.json`` is missing.
        cache_dir: the bundled model's cache (only for that fallback).

    Raises:
        ExportNotFoundError: neither ``serving.json`` nor ``base_model`` says which model this is.
    """
    run_dir = Path(run_dir)
    settings_file = run_dir / SERVING_SETTINGS
    if settings_file.is_file():
        data = json.loads(settings_file.read_text(encoding="utf-8"))
        template_file = run_dir / data.get("chat_template_file", CHAT_TEMPLATE_FILE)
        return ServingSettings(
            base_model=data["base_model"],
            base_model_path=Path(data["base_model_path"]),
            chat_template=template_file.read_text(encoding="utf-8"),
            chat_template_source=str(data.get("chat_template_source") or template_file),
            tool_call_parser=data.get("tool_call_parser"),
            reasoning_parser=data.get("reasoning_parser"),
        )
    if base_model is None:
        raise ExportNotFoundError(f"{run_dir} has no {SERVING_SETTINGS}: start the backend on it once")
    from ..bundled import load_tokenizer
    from .model_family import resolve_model_family

    logger.warning(
        "%s has no %s (a run from an older backend): assuming today's default template and parsers for %s",
        run_dir, SERVING_SETTINGS, base_model,
    )  # fmt: skip
    path = resolve_model_path(base_model, cache_dir)
    family = resolve_model_family(load_tokenizer(path), bundled=is_bundled(base_model))
    return ServingSettings(base_model, path, **asdict(family), recorded=False)


def _deploy_base(settings: ServingSettings) -> str:
    """What a deployment passes to ``vllm serve`` (and PEFT) as the base model.

    A Hub id stays a Hub id; the bundled model and a local folder become the absolute folder the
    backend loaded (for the bundled model: its fp32 conversion, the exact weights trained on).
    """
    given = settings.base_model
    if not is_bundled(given) and not Path(given).expanduser().is_dir() and given.count("/") == 1:
        return given
    return str(Path(settings.base_model_path).resolve())


# ------------------------------------------------------------------ writing the export


def _lora_rank(adapter_config: dict[str, Any]) -> int:
    """The largest LoRA rank in an adapter config (``r`` and any per-module ``rank_pattern``)."""
    patterns = adapter_config.get("rank_pattern") or {}
    return max([int(adapter_config.get("r") or 8), *(int(r) for r in patterns.values())])


def _vllm_max_lora_rank(rank: int) -> int:
    for allowed in _VLLM_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ExportError(f"LoRA rank {rank} is above the largest vLLM serves ({_VLLM_LORA_RANKS[-1]})")


def vllm_serve_command(
    *, base: str, name: str, out: Path, settings: ServingSettings, merged: bool, lora_rank: int | None
) -> list[str]:
    """The ``vllm serve`` argv that serves the export as ``name`` with the run's template and parsers."""
    template_flags = settings.family().vllm_flags(out / CHAT_TEMPLATE_FILE)
    if merged:
        return ["vllm", "serve", str(out), "--served-model-name", name, *template_flags]
    assert lora_rank is not None
    return [
        "vllm", "serve", base, "--enable-lora", "--lora-modules", f"{name}={out}",
        "--max-lora-rank", str(_vllm_max_lora_rank(lora_rank)), *template_flags,
    ]  # fmt: skip


def _copy_adapter(source: Path, target: Path, base: str) -> dict[str, Any]:
    """Copy the adapter files; point ``base_model_name_or_path`` at ``base``; returns the config."""
    for filename in _ADAPTER_FILES:
        if not (source / filename).is_file():
            raise ExportNotFoundError(f"the checkpoint {source} has no {filename}")
    config = json.loads((source / "adapter_config.json").read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base
    config["inference_mode"] = True
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    shutil.copy2(source / "adapter_model.safetensors", target / "adapter_model.safetensors")
    if config.get("modules_to_save"):
        logger.warning(
            "the adapter also saves whole modules %s, which vLLM may not serve", config["modules_to_save"]
        )
    return config


def _write_tokenizer(target: Path, settings: ServingSettings) -> None:
    """The base tokenizer, carrying the run's chat template, plus that template as its own file."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(settings.base_model_path), local_files_only=True)
    tokenizer.chat_template = settings.chat_template
    tokenizer.save_pretrained(str(target))
    (target / CHAT_TEMPLATE_FILE).write_text(settings.chat_template, encoding="utf-8")


def _write_merged(target: Path, base_path: Path, adapter: Path | None) -> None:
    """Base weights (fp32) + adapter, merged, saved as safetensors in the base model's own dtype."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base_path), dtype=torch.float32, local_files_only=True)
    saved_dtype = getattr(model.config, "dtype", None)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=False).merge_and_unload()
    is_float = isinstance(saved_dtype, torch.dtype) and saved_dtype.is_floating_point
    if is_float and saved_dtype != torch.float32:  # e.g. a bf16 base is saved in bf16
        model = model.to(saved_dtype)
    model.save_pretrained(str(target))


# shape: a README template: its length is the text it writes
def _readme(manifest: dict[str, Any], settings: ServingSettings) -> str:
    name, step, out = manifest["name"], manifest["step"], manifest["path"]
    command = shlex.join(manifest["vllm_command"])
    base = manifest["base_model_name_or_path"]
    lines = [f"# {name}@{step}, exported by art-adapters", ""]
    if manifest["merged"]:
        lines += [
            f"A full model: the base model `{settings.base_model}` with the LoRA checkpoint of step {step} "
            "merged into its weights (safetensors). Serve it with vLLM:",
        ]
    else:
        lines += [
            f"A PEFT LoRA adapter (step {step}) for the base model `{settings.base_model}`. Serve it with "
            f"vLLM, then ask for model `{name}`:",
        ]
    lines += ["", "```bash", command, "```", ""]
    lines += [
        f"The chat template `{CHAT_TEMPLATE_FILE}` is the one the backend rendered every training prompt "
        f"with (from {settings.chat_template_source}); with it vLLM renders the same prompts."
    ]
    if settings.tool_call_parser:
        lines += [
            f"Tool calls are parsed with vLLM's `{settings.tool_call_parser}` parser, as during training."
        ]
    else:
        lines += [
            "No `--tool-call-parser` is given: the chat template renders no tools, and the backend "
            "served no tool calls for this model."
        ]
    if settings.reasoning_parser:
        lines += [f"Reasoning (`<think>`) is split off with vLLM's `{settings.reasoning_parser}` parser."]
    if not settings.recorded:
        lines += [
            "",
            "**Note:** the run directory had no `serving.json` (an older backend): the template and "
            "parsers above are the defaults a backend picks for this base model today, not a record of "
            "what training used.",
        ]
    lines += ["", "## The base model", ""]
    if manifest["merged"]:
        lines += [f"Merged from `{base}` (given to the backend as `{settings.base_model}`)."]
    elif base != settings.base_model:
        lines += [
            f"`{base}` is the folder the backend loaded for `{settings.base_model}`: the exact weights the "
            "adapter was trained on. It is also `base_model_name_or_path` in `adapter_config.json`. On "
            "another machine, copy that folder and pass its new path instead."
        ]
        if is_bundled(settings.base_model):
            lines += [
                "It is the bundled SmolLM2-135M-Instruct as art-adapters converts it (its Q4_1 GGUF "
                "dequantised to fp32), which differs slightly from `HuggingFaceTB/SmolLM2-135M-Instruct`."
            ]
    else:
        lines += [f"`{base}` (also `base_model_name_or_path` in `adapter_config.json`)."]
    lines += ["", "## Load it with transformers", "", "```python"]
    if manifest["merged"]:
        lines += [
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            f"model = AutoModelForCausalLM.from_pretrained({out!r})",
            f"tokenizer = AutoTokenizer.from_pretrained({out!r})  # carries the chat template",
        ]
    else:
        lines += [
            "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            f"base = AutoModelForCausalLM.from_pretrained({base!r})",
            f"model = PeftModel.from_pretrained(base, {out!r})",
            f"tokenizer = AutoTokenizer.from_pretrained({out!r})  # carries the chat template",
        ]
    lines += ["```", "", "## Provenance", ""]
    lines += [
        f"- model `{name}`, step {step}, run directory `{manifest['run_dir']}`",
        f"- checkpoint `{manifest['checkpoint']}`" if manifest["checkpoint"] else "- step 0: base weights",
        f"- exported {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(manifest['created']))}; "
        f"`{EXPORT_MANIFEST}` holds the same facts as JSON",
        "",
    ]
    return "\n".join(lines)


def _prepare_out(out: Path, run_dir: Path, untouchable: list[Path], force: bool) -> None:
    """Refuse an ``out`` that would clobber data: a non-empty folder without ``force``, a file, the run
    directory or a folder holding it, or anything overlapping ``untouchable`` (checkpoints, base model)."""
    resolved = out.resolve()
    run = run_dir.resolve()
    if resolved == run or resolved in run.parents:
        raise ExportError(f"refusing to export into {out}: it holds the run directory {run_dir}")
    for keep in untouchable:
        keep = keep.resolve()
        if resolved == keep or resolved in keep.parents or keep in resolved.parents:
            raise ExportError(f"refusing to export into {out}: it overlaps {keep}, which the export reads")
    if out.exists() and not out.is_dir():
        raise ExportExistsError(f"{out} exists and is not a folder; choose another output path")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ExportExistsError(
            f"{out} already exists and is not empty; choose another folder, or pass --force "
            "(force=True) to replace it"
        )


# shape: the export's steps in order inside one atomic folder
def export_checkpoint(
    run_dir: str | os.PathLike[str],
    name: str,
    step: int | None = None,
    *,
    out: str | os.PathLike[str],
    merged: bool = False,
    force: bool = False,
    cache_dir: Path | None = None,
) -> Path:
    """Export checkpoint ``name@step`` of a backend run as a PEFT adapter folder or a merged model.

    Blocking (a merged export loads the model: seconds for the bundled one); needs the backend's
    dependencies, not a running backend. The folder is written all at once (a temporary folder
    renamed into place, never half-written) and holds:

    * **adapter** (default): the step's ``adapter_config.json`` (``base_model_name_or_path`` set to
      what ``vllm serve`` needs: the resolved base-model folder, or the Hub id) and
      ``adapter_model.safetensors``; the base model's tokenizer with the chat template the backend
      rendered every prompt with; that template again as ``chat_template.jinja``; ``export.json``
      (what was exported and from where); and a ``README.md`` with the exact
      ``vllm serve BASE --enable-lora --lora-modules NAME=OUT --chat-template ... --tool-call-parser ...``
      line.
    * **merged** (``merged=True``): the base weights with the adapter merged in (computed in fp32,
      saved as safetensors in the base model's own dtype), the same tokenizer, template, manifest and
      a README with ``vllm serve OUT ...``. Step 0 (the base weights) exports only this way.

    The template and parsers come from :func:`read_serving_settings`.

    Args:
        run_dir: the backend's run directory (``serve --run-dir``).
        name: the registered model's name.
        step: the checkpoint step; ``None`` for the latest. Step 0 (the base weights) needs ``merged``.
        out: the folder to write (created with its parents; written elsewhere first and renamed).
        merged: write the base model with the adapter merged in, instead of the adapter.
        force: replace ``out`` if it exists and is not empty.
        cache_dir: the bundled model's cache, for run directories without ``serving.json``.

    Returns:
        The absolute path of the exported folder.

    Raises:
        ExportNotFoundError: no such run directory, model, step or checkpoint folder.
        ExportExistsError: ``out`` exists and is not empty, and ``force`` is not set.
        ExportError: step 0 without ``merged``, or ``out`` overlaps the run directory or the base model.
    """
    run_dir = Path(run_dir)
    record = _load_record(run_dir, name)
    chosen, adapter = _resolve_step(record, step)
    if adapter is None and not merged:
        raise ExportError(
            f"{name}@{chosen} is the base weights, with no adapter to export: pass --merged (merged=True) "
            f"to write the base model as a folder, or deploy the base model {record.base_model!r} itself"
        )
    settings = read_serving_settings(run_dir, record.base_model, cache_dir)
    if settings.base_model != record.base_model:
        raise ExportError(
            f"model {name!r} was registered on {record.base_model!r}, but the backend last ran this run "
            f"directory on {settings.base_model!r}; start it on {record.base_model!r} once, then export"
        )
    if not settings.base_model_path.is_dir():
        raise ExportNotFoundError(
            f"the base model folder {settings.base_model_path} the backend loaded is gone; restore it (for "
            f"the bundled model: start the backend once to convert it again)"
        )
    out = Path(out).expanduser().absolute()
    _prepare_out(out, run_dir, [run_dir / "models", settings.base_model_path], force)
    base = _deploy_base(settings)
    started = time.monotonic()
    with atomic_directory(out, replace=True) as tmp:  # an existing `out` was allowed by _prepare_out
        lora_rank: int | None = None
        if merged:
            _write_merged(tmp, settings.base_model_path, adapter)
        else:
            assert adapter is not None
            lora_rank = _lora_rank(_copy_adapter(adapter, tmp, base))
        _write_tokenizer(tmp, settings)
        manifest: dict[str, Any] = {
            "name": name,
            "step": chosen,
            "merged": merged,
            "path": str(out),
            "base_model": settings.base_model,
            "base_model_name_or_path": base,
            "lora_rank": lora_rank,
            "chat_template_file": CHAT_TEMPLATE_FILE,
            "chat_template_source": settings.chat_template_source,
            "tool_call_parser": settings.tool_call_parser,
            "reasoning_parser": settings.reasoning_parser,
            "serving_settings_recorded": settings.recorded,
            "vllm_command": vllm_serve_command(
                base=base, name=name, out=out, settings=settings, merged=merged, lora_rank=lora_rank
            ),
            "run_dir": str(run_dir.resolve()),
            "checkpoint": None if adapter is None else str(adapter),
            "created": time.time(),
        }
        (tmp / EXPORT_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(_readme(manifest, settings), encoding="utf-8")
    logger.info(
        "exported %s@%d (%s) to %s in %.1f s",
        name, chosen, "merged" if merged else "adapter", out, time.monotonic() - started,
    )  # fmt: skip
    return out
