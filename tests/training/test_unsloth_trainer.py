"""UnslothTrainer: the shared GRPO step on a model loaded by unsloth.FastLanguageModel.

Runs when ``unsloth`` is installed (on CPU it is: ``pip install --no-deps unsloth
unsloth_zoo``), skipped with the reason otherwise. Unsloth patches transformers on import,
so the training runs in a child process and this process never imports it; the adapter
it writes is then loaded by the plain PEFT trainer, which must score tokens identically.
"""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap
from pathlib import Path

import pytest
from art_adapters_backend.training.peft_trainer import PeftTrainer

from art_adapters import TrainConfig
from tests.helpers.processes import run_python
from tests.helpers.toy_sequences import completion_sequence

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("unsloth") is None,
        reason="unsloth not installed (pip install --no-deps unsloth unsloth_zoo runs it on CPU)",
    ),
]

CHILD = textwrap.dedent(
    """
    import json, sys, torch
    torch.set_num_threads(1)
    from art_adapters import TrainConfig
    from art_adapters_backend.training.data import TrainingSequence
    from art_adapters_backend.training.unsloth_trainer import UnslothTrainer

    model_path, seqs_file, out_dir, result_file = sys.argv[1:5]
    seqs = [TrainingSequence.model_validate(s) for s in json.load(open(seqs_file))]
    config = TrainConfig.model_validate_json(open(seqs_file + ".config").read())
    trainer = UnslothTrainer(model_path, device="cpu")
    loaded_by_unsloth = "unsloth" in sys.modules and hasattr(trainer.base, "max_seq_length")
    old = trainer.score(seqs, config)
    seqs = [s.model_copy(update={"old_logprobs": [x if m else None for x, m in zip(lp, s.loss_mask)]})
            for s, lp in zip(seqs, old)]
    metrics = [trainer.train_step(seqs, config).model_dump() for _ in range(3)]
    trainer.save_adapter(out_dir)
    json.dump({"metrics": metrics, "scores": trainer.score(seqs, config),
               "loaded_by_unsloth": loaded_by_unsloth}, open(result_file, "w"))
    """
)


def test_unsloth_trains_and_writes_a_plain_peft_adapter(
    bundled_path: Path, tokenizer: object, render: object, tmp_path: Path
) -> None:
    config = TrainConfig(learning_rate=5e-4, micro_batch_size=2, lora_rank=8, lora_alpha=16)
    seqs = []
    for i, (question, answer, advantage) in enumerate(
        [("2+2?", "4", 1.0), ("Capital of France?", "Rome.", -1.0)]
    ):
        prompt = render([{"role": "user", "content": question}], None, add_generation_prompt=True)
        completion = tokenizer.encode(answer, add_special_tokens=False)  # type: ignore[attr-defined]
        seqs.append(completion_sequence(prompt, completion, advantage, "g", str(i)))
    seqs_file = tmp_path / "seqs.json"
    seqs_file.write_text(json.dumps([s.model_dump() for s in seqs]))
    Path(f"{seqs_file}.config").write_text(config.model_dump_json())
    result_file, out_dir = tmp_path / "result.json", tmp_path / "adapter"
    env = {**os.environ, "UNSLOTH_DISABLE_STATISTICS": "1"}
    args = ["-c", CHILD, str(bundled_path), str(seqs_file), str(out_dir), str(result_file)]
    run_python(args, env=env, timeout=400, tail=3000)
    result = json.loads(result_file.read_text())
    losses = [m["loss"] for m in result["metrics"]]
    assert result["metrics"][0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert losses[-1] < losses[0] - 0.03, losses
    assert result["loaded_by_unsloth"], "the model was not loaded through unsloth.FastLanguageModel"

    # The adapter is a plain PEFT folder: the default trainer loads it and scores the same.
    peft_trainer = PeftTrainer(bundled_path)
    peft_trainer.load_adapter(out_dir, config)
    assert peft_trainer.steps_done == 3
    scores = peft_trainer.score(seqs, config)
    worst = max(
        abs(a - b) for x, y in zip(scores, result["scores"], strict=True) for a, b in zip(x, y, strict=True)
    )
    assert worst < 1e-4, worst
