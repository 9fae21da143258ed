"""``export_checkpoint`` offline on a real run directory: a tiny Llama-architecture model folder (the
bundled tokenizer, random weights), the backend's own registry, checkpoint store and serving
settings, and a LoRA checkpoint with nonzero weights. The export reloads with plain
transformers/PEFT and gives the backend engine's logits; the README's vLLM line names the
files it wrote; bad input is a clear error and leaves nothing behind; the CLI does the same.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from art_adapters_backend.serving.export import (
    CHAT_TEMPLATE_FILE,
    EXPORT_MANIFEST,
    ExportError,
    ExportExistsError,
    ExportNotFoundError,
    ServingSettings,
    export_checkpoint,
    parse_model_ref,
    vllm_serve_command,
)
from art_adapters_backend.serving.model_family import (
    bundled_chat_template_path,
    resolve_model_family,
    write_serving_settings,
)
from art_adapters_backend.serving.registry import Registry
from art_adapters_backend.training.checkpoints import CheckpointStore
from typer.testing import CliRunner

from art_adapters.apps._cli import app as cli_app

NAME = "tiny"
TOLERANCE = 1e-4
PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama folder on the bundled tokenizer, with the shipped tool template as its own."""
    from art_adapters_backend.bundled import resolve_model_path
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-base")
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path("smollm2-135m-instruct")))
    tokenizer.chat_template = bundled_chat_template_path().read_text(encoding="utf-8")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny_run(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory as the backend leaves it: serving settings, registry, checkpoint 1 of ``tiny``."""
    from art_adapters_backend.bundled import load_tokenizer
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    run_dir = tmp_path_factory.mktemp("tiny-run")
    family = resolve_model_family(load_tokenizer(tiny_base), bundled=False)
    write_serving_settings(run_dir, str(tiny_base), tiny_base, family)
    registry = Registry(run_dir, str(tiny_base))
    registry.register(NAME, "export-tests", str(tiny_base))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_base), dtype=torch.float32)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    peft_model = get_peft_model(model, lora)
    torch.manual_seed(1)
    with torch.no_grad():  # a freshly made LoRA is a no-op (B = 0): give it weights that matter
        for param_name, param in peft_model.named_parameters():
            if "lora_B" in param_name:
                param.normal_(0.0, 0.2)
    store = CheckpointStore(run_dir / "models" / NAME / "checkpoints")
    checkpoint = store.write(1, lambda folder: peft_model.save_pretrained(str(folder)), {"loss": 0.5})
    registry.add_step(NAME, 1, checkpoint.path)
    return run_dir


@pytest.fixture(scope="module")
def prompt_ids(tiny_base: Path) -> torch.Tensor:
    """The prompt rendered by the run's chat template, as the backend renders it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_base))
    text = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    return torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])


@pytest.fixture(scope="module")
async def engine_logits(tiny_base: Path, tiny_run: Path, prompt_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The backend engine's logits (every position) for the prompt: base weights and ``tiny@1``."""
    from art_adapters_backend.serving.engine.torch_engine import TorchEngine

    engine = TorchEngine.load(tiny_base)
    checkpoint = tiny_run / "models" / NAME / "checkpoints" / "000001"
    await engine.load_adapter(f"{NAME}@1", checkpoint)
    with torch.no_grad():
        served = engine.model(input_ids=prompt_ids, adapter_names=[f"{NAME}@1"]).logits[0]
        base = engine.model(input_ids=prompt_ids, adapter_names=["__base__"]).logits[0]
    await engine.close()
    return {"adapter": served, "base": base}


def _logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=ids).logits[0]


def _command(out: Path) -> list[str]:
    return json.loads((out / EXPORT_MANIFEST).read_text())["vllm_command"]


def _readme_command(out: Path) -> list[str]:
    """The ``vllm serve`` line of the README, as argv."""
    [line] = [ln for ln in (out / "README.md").read_text().splitlines() if ln.startswith("vllm serve ")]
    return shlex.split(line)


@pytest.mark.slow
async def test_adapter_export_reloads_with_peft_and_gives_the_engines_logits(
    tiny_base: Path, tiny_run: Path, prompt_ids: torch.Tensor, engine_logits: dict[str, torch.Tensor],
    tmp_path: Path,
) -> None:  # fmt: skip
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = export_checkpoint(tiny_run, NAME, 1, out=tmp_path / "adapter")
    assert out == tmp_path / "adapter"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["README.md", "adapter_config.json", "adapter_model.safetensors", CHAT_TEMPLATE_FILE, EXPORT_MANIFEST,
         "tokenizer.json", "tokenizer_config.json"]
    )  # fmt: skip (no optimizer or trainer state)
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tiny_base.resolve()) and config["peft_type"] == "LORA"

    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"])
    reloaded = _logits(PeftModel.from_pretrained(base, str(out)), prompt_ids)
    diff = (reloaded - engine_logits["adapter"]).abs().max().item()
    print(f"tiny adapter export vs engine: max |logit diff| = {diff:.2e}")
    assert diff < TOLERANCE
    # The adapter matters: without it the logits are far apart (so the check above can fail).
    assert (engine_logits["adapter"] - engine_logits["base"]).abs().max().item() > 100 * TOLERANCE

    template = (tiny_run / CHAT_TEMPLATE_FILE).read_text()
    assert (out / CHAT_TEMPLATE_FILE).read_text() == template
    assert AutoTokenizer.from_pretrained(str(out)).chat_template == template


@pytest.mark.slow
async def test_merged_export_reloads_with_transformers_and_gives_the_engines_logits(
    tiny_run: Path, prompt_ids: torch.Tensor, engine_logits: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = export_checkpoint(tiny_run, NAME, out=tmp_path / "merged", merged=True)  # latest step: 1
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(str(out))
    assert merged.config.dtype == torch.float32
    diff = (_logits(merged, prompt_ids) - engine_logits["adapter"]).abs().max().item()
    print(f"tiny merged export vs engine: max |logit diff| = {diff:.2e}")
    assert diff < TOLERANCE
    template = (tiny_run / CHAT_TEMPLATE_FILE).read_text()
    assert AutoTokenizer.from_pretrained(str(out)).chat_template == template

    command = _readme_command(out)
    assert command == _command(out)
    assert command[:3] == ["vllm", "serve", str(out)] and "--enable-lora" not in command
    assert command[command.index("--served-model-name") + 1] == NAME

    # Step 0 merged is the base weights themselves.
    base_out = export_checkpoint(tiny_run, NAME, 0, out=tmp_path / "base", merged=True)
    diff0 = (_logits(AutoModelForCausalLM.from_pretrained(str(base_out)), prompt_ids) - engine_logits["base"])
    assert diff0.abs().max().item() < TOLERANCE


@pytest.mark.slow
def test_readme_has_the_exact_vllm_line_with_files_that_exist(
    tiny_base: Path, tiny_run: Path, tmp_path: Path
) -> None:
    out = export_checkpoint(tiny_run, NAME, out=tmp_path / "adapter")
    command = _readme_command(out)
    assert command == _command(out)
    assert command[:3] == ["vllm", "serve", str(tiny_base.resolve())]
    assert "--enable-lora" in command
    assert command[command.index("--lora-modules") + 1] == f"{NAME}={out}"
    assert command[command.index("--max-lora-rank") + 1] == "8"  # r=4; vLLM accepts 8, 16, 32, ...
    template = Path(command[command.index("--chat-template") + 1])
    assert template == out / CHAT_TEMPLATE_FILE and template.is_file()
    assert command[command.index("--tool-call-parser") + 1] == "hermes"
    assert command[command.index("--tool-call-parser") - 1] == "--enable-auto-tool-choice"
    assert "--reasoning-parser" not in command
    readme = (out / "README.md").read_text()
    assert "PeftModel.from_pretrained" in readme and f"{NAME}@1" in readme
    assert str(tiny_base.resolve()) in readme


def test_vllm_line_without_parsers_and_with_reasoning(tmp_path: Path) -> None:
    def settings(tool: str | None, reasoning: str | None) -> ServingSettings:
        return ServingSettings("org/model", tmp_path, "{{ messages }}", "tokenizer", tool, reasoning)

    plain = vllm_serve_command(base="org/model", name="a", out=tmp_path, settings=settings(None, None),
                               merged=False, lora_rank=16)  # fmt: skip
    assert "--tool-call-parser" not in plain and "--enable-auto-tool-choice" not in plain
    assert plain[plain.index("--max-lora-rank") + 1] == "16"
    thinking = vllm_serve_command(
        base="org/model", name="a", out=tmp_path, settings=settings("hermes", "qwen3"), merged=False,
        lora_rank=33,
    )
    assert thinking[thinking.index("--reasoning-parser") + 1] == "qwen3"
    assert thinking[thinking.index("--max-lora-rank") + 1] == "64"


@pytest.mark.slow
def test_bad_input_is_a_clear_error_and_leaves_nothing_behind(tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(ExportNotFoundError, match="'nobody' is not registered .*registered: tiny"):
        export_checkpoint(tiny_run, "nobody", out=out)
    with pytest.raises(ExportNotFoundError, match=r"has no step 7; its steps are \[0, 1\]"):
        export_checkpoint(tiny_run, NAME, 7, out=out)
    with pytest.raises(ExportError, match="base weights.*--merged"):
        export_checkpoint(tiny_run, NAME, 0, out=out)
    with pytest.raises(ExportNotFoundError, match="not a backend run directory"):
        export_checkpoint(tmp_path / "no-run", NAME, out=out)
    with pytest.raises(ExportError, match="holds the run directory"):
        export_checkpoint(tiny_run, NAME, out=tiny_run.parent, force=True)
    with pytest.raises(ExportError, match="overlaps"):
        checkpoint = tiny_run / "models" / NAME / "checkpoints" / "000001"
        export_checkpoint(tiny_run, NAME, out=checkpoint, force=True)
    with pytest.raises(ExportError, match="NAME or NAME@STEP"):
        parse_model_ref("tiny@latest")
    assert parse_model_ref("tiny@3") == ("tiny", 3) and parse_model_ref("tiny") == ("tiny", None)
    assert not out.exists() and list(tmp_path.iterdir()) == []

    # An existing, non-empty OUT is kept unless forced; forced, it is replaced whole.
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(ExportExistsError, match="not empty.*--force"):
        export_checkpoint(tiny_run, NAME, out=out)
    assert (out / "precious.txt").read_text() == "keep me"
    export_checkpoint(tiny_run, NAME, out=out, force=True)
    assert not (out / "precious.txt").exists() and (out / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary or old folder left


@pytest.mark.slow
def test_a_broken_checkpoint_fails_without_a_half_written_folder(tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    registry = json.loads((run / "registry.json").read_text())
    checkpoint = run / "models" / NAME / "checkpoints" / "000001"
    registry["models"][NAME]["checkpoints"]["1"] = str(checkpoint)
    (run / "registry.json").write_text(json.dumps(registry))
    (checkpoint / "adapter_model.safetensors").unlink()
    exports = tmp_path / "exports"
    exports.mkdir()
    with pytest.raises(ExportNotFoundError, match="has no adapter_model.safetensors"):
        export_checkpoint(run, NAME, out=exports / "a")
    assert list(exports.iterdir()) == []


@pytest.mark.slow
def test_a_run_without_serving_settings_falls_back_and_says_so(tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (run / "serving.json").unlink()
    out = export_checkpoint(run, NAME, out=tmp_path / "a")
    manifest = json.loads((out / EXPORT_MANIFEST).read_text())
    assert manifest["serving_settings_recorded"] is False and manifest["tool_call_parser"] == "hermes"
    assert "had no `serving.json`" in (out / "README.md").read_text()


@pytest.mark.slow
def test_cli_exports_and_reports_errors(tiny_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli-out"
    result = runner.invoke(cli_app, ["export", f"{NAME}@1", str(out), "--run-dir", str(tiny_run)])
    assert result.exit_code == 0, result.output
    assert f"exported {NAME}@1" in result.output and "vllm serve" in result.output
    assert (out / "adapter_config.json").is_file()

    again = runner.invoke(cli_app, ["export", NAME, str(out), "--run-dir", str(tiny_run)])
    assert again.exit_code == 2 and "--force" in again.output
    unknown = runner.invoke(cli_app, ["export", "nobody@1", str(tmp_path / "x"), "--run-dir", str(tiny_run)])
    assert unknown.exit_code == 2 and "not registered" in unknown.output
    base = runner.invoke(cli_app, ["export", f"{NAME}@0", str(tmp_path / "y"), "--run-dir", str(tiny_run)])
    assert base.exit_code == 2 and "--merged" in base.output
    step = runner.invoke(cli_app, ["export", f"{NAME}@9", str(tmp_path / "z"), "--run-dir", str(tiny_run)])
    assert step.exit_code == 2 and "its steps are [0, 1]" in step.output
    helped = runner.invoke(cli_app, ["export", "--help"])
    assert helped.exit_code == 0 and "--merged" in helped.output and "vllm serve" in helped.output


@pytest.mark.slow
def test_a_missing_base_model_folder_is_named(tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    settings = json.loads((run / "serving.json").read_text())
    settings["base_model_path"] = str(tmp_path / "moved-away")
    (run / "serving.json").write_text(json.dumps(settings))
    with pytest.raises(ExportNotFoundError, match="moved-away the backend loaded is gone"):
        export_checkpoint(run, NAME, out=tmp_path / "a")
    assert not (tmp_path / "a").exists()
