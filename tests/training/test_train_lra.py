"""training/train_lra.py: the LRA-style tasks on the shared runner (folder guards: test_training_scripts)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from datasets import Value, load_from_disk

from hf_xcv.cli import train_lra
from hf_xcv.data.lra import load_lra_dataset
from hf_xcv.models.xformer import XFormerForSequenceClassification

# digits at 8x8 = 64 pixel tokens: a task a tiny model learns in a few dozen steps
SMALL = ["--task", "image", "--task_settings", "image_size=8", "--disable_tqdm", "--per_device_eval_batch_size", "256"]
STEPS = 200


def mean_loss(model: torch.nn.Module, data, limit: int = 512) -> float:
    rows = data.with_format("numpy").select(range(min(limit, len(data))))
    batch = train_lra.collate([rows[i] for i in range(len(rows))])
    model.eval()
    with torch.no_grad():
        return model(**batch).loss.item()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two entries trained with the same budget: full (sdpa) and linformer (its k tied to the 64 tokens)."""
    runs = {}
    for entry in ("full", "linformer"):
        out = tmp_path_factory.mktemp("lra") / entry
        argv = [*SMALL, "--attention_type", entry, "--output_dir", str(out), "--max_train_steps", str(STEPS)]
        results = train_lra.main([*argv, "--learning_rate", "3e-3", "--timing_warmup_steps", "2"])
        runs[entry] = (out, results)
    return runs


@pytest.mark.parametrize("entry", ["full", "linformer"])
def test_a_tiny_run_of_two_entries_lowers_the_loss(trained, entry):
    out, results = trained[entry]
    data = load_lra_dataset("image", image_size=8)["train"]
    model = XFormerForSequenceClassification.from_pretrained(out)
    assert model.config.attention_type == entry
    torch.manual_seed(0)
    untrained = XFormerForSequenceClassification(model.config)
    before, after = mean_loss(untrained, data), mean_loss(model, data)
    assert before == pytest.approx(math.log(10), rel=0.05)  # an untrained classifier: ~uniform over 10 digits
    assert after < 0.75 * before, (before, after)
    assert results["test"]["accuracy"] > 0.3  # chance is 0.1
    assert results["completed_steps"] == STEPS


def test_each_entry_gets_its_settings_at_the_task_length(trained):
    out, _ = trained["linformer"]
    config = json.loads((out / "config.json").read_text())
    assert config["attention_kwargs"]["seq_len"] == 64 and config["max_position_embeddings"] == 64
    assert config["hidden_size"] == 64 and config["num_hidden_layers"] == 2  # the task's preset, as for full
    full = json.loads((trained["full"][0] / "config.json").read_text())
    shared = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    assert {k: full[k] for k in shared} == {k: config[k] for k in shared}


def test_results_hold_accuracy_and_the_timed_training_steps(trained):
    out, results = trained["full"]
    assert results["training"]["timed_steps"] == STEPS - 2  # --timing_warmup_steps 2 left out
    assert results["training"]["steps_per_second"] > 0
    recipe = {key: results["training"][key] for key in ("per_device_train_batch_size", "weight_decay")}
    assert recipe == {"per_device_train_batch_size": 16, "weight_decay": 0.01}  # the digits' recipe, as run
    assert results["validation"]["num_samples"] == 179 and results["test"]["num_samples"] == 179
    assert json.loads((out / "all_results.json").read_text()) == json.loads(json.dumps(results))
    card = (out / "README.md").read_text()
    text = " ".join(card.split())
    meta = yaml.safe_load(card.split("---")[1])
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert metrics["accuracy"] == pytest.approx(results["test"]["accuracy"])
    assert "long-range-arena" in meta["tags"] and "attention `full`" in text and "(64 tokens)" in text
    assert "test = load_lra_dataset('image', seed=0, image_size=8)[\"test\"]" in card  # the run's own data


def test_a_saved_dataset_is_read_instead_of_generated(tmp_path):
    data = load_lra_dataset("listops", num_train=32, num_validation=8, num_test=8, min_length=10, max_length=24)
    data.save_to_disk(str(tmp_path / "listops"))
    out = tmp_path / "run"
    argv = ["--task", "listops", "--dataset", str(tmp_path / "listops"), "--attention_type", "performer"]
    results = train_lra.main([*argv, "--output_dir", str(out), "--max_train_steps", "2", "--disable_tqdm"])
    assert results["test"]["num_samples"] == 8
    config = json.loads((out / "config.json").read_text())
    assert config["max_position_embeddings"] == 24 and len(config["id2label"]) == 10 and config["vocab_size"] == 16


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task", "text"], "--task must be one of"),
        (["--task", "listops", "--task_settings", "max_length=2"], "min_length <= max_length"),
        (["--task", "image", "--attention_type", "xl"], "'xl' only attends causally"),
        (["--task", "image", "--attention_type", "axial"], "2-D token grid"),
        (["--task", "image", "--config_overrides", "vocab_size=100"], "vocab_size >= 256"),
    ],
)
def test_bad_arguments_are_refused_before_the_run_folder_is_claimed(tmp_path, argv, message):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=message):
        train_lra.main([*argv, "--output_dir", str(out)])
    assert not out.exists()


def test_entry_settings_given_by_hand_keep_the_length_tied_ones_consistent():
    args = train_lra.ModelArguments(attention_type="sinkhorn", attention_kwargs="block_size=16")
    config = train_lra.build_config(args, "image", 1024, [str(d) for d in range(10)], 256)
    assert config.attention_kwargs["block_size"] == 16 and config.attention_kwargs["max_blocks"] == 64
    args = train_lra.ModelArguments(attention_type="linformer", attention_kwargs='{"k": 8, "seq_len": 2048}')
    config = train_lra.build_config(args, "image", 1024, [str(d) for d in range(10)], 256)
    assert config.attention_kwargs["seq_len"] == 2048 and config.attention_kwargs["k"] == 8  # asked for: kept


def recipe(*argv: str) -> tuple:
    _, _, args = train_lra.parse_args([*argv, "--output_dir", "unused"])
    return args.per_device_train_batch_size, args.weight_decay, args.max_train_steps, args.num_train_epochs


def test_each_task_trains_with_its_recipe_where_no_flag_sets_it():
    assert recipe("--task", "pathfinder")[:3] == (128, 0.0, 3000)  # LRA's Pathfinder recipe at a CPU scale
    assert recipe("--task", "listops") == (16, 0.01, None, 10)
    assert recipe("--task", "image") == (16, 0.01, None, 10)
    # a flag wins; a step budget or an epoch count given by hand replaces the recipe's step budget
    assert recipe("--task", "pathfinder", "--per_device_train_batch_size", "8", "--weight_decay", "0.1")[:3] == (
        8, 0.1, 3000,
    )  # fmt: skip
    assert recipe("--task", "pathfinder", "--max_train_steps", "5")[:3] == (128, 0.0, 5)
    assert recipe("--task", "pathfinder", "--num_train_epochs", "2")[2:] == (None, 2)
    assert recipe("--task", "listops", "--weight_decay", "0")[:2] == (16, 0.0)  # 0 is a setting, not "unset"


def test_the_pathfinder_preset_is_lras_pathfinder_encoder():
    config = train_lra.build_config(train_lra.ModelArguments(), "pathfinder", 256, ["0", "1"], 256)
    sizes = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "pooling")
    assert [getattr(config, name) for name in sizes] == [32, 1, 2, 64, "mean"]


def test_pixel_presets_have_no_padding_id_and_take_the_shared_dummy_inputs():
    from model_specs.xformer import xformer_dummy_inputs

    config = train_lra.build_config(train_lra.ModelArguments(), "pathfinder", 64, ["0", "1"], 256)
    assert config.pad_token_id is None  # a black pixel (id 0) is a token like any other
    model = XFormerForSequenceClassification(config)
    assert model.model.embeddings.word_embeddings.padding_idx is None
    assert model(**xformer_dummy_inputs(model, length=64)).loss.isfinite()


def test_a_dataset_folder_is_checked(tmp_path):
    with pytest.raises(ValueError, match="not a DatasetDict saved with save_to_disk"):
        train_lra.load_data(train_lra.DataArguments(task="image", dataset=str(tmp_path)))
    data = load_lra_dataset("listops", num_train=10, num_validation=10, num_test=10, min_length=8, max_length=20)
    data["train"] = data["train"].map(lambda row: {"input_ids": row["input_ids"][:-1]})  # one length too short
    data.save_to_disk(str(tmp_path / "ragged"))
    loaded = train_lra.load_data(train_lra.DataArguments(task="listops", dataset=str(tmp_path / "ragged")))
    with pytest.raises(ValueError, match="every sequence must have one length"):
        train_lra.sequence_shape(loaded)
    with pytest.raises(ValueError, match="--task_settings changes generated data"):
        train_lra.load_data(
            train_lra.DataArguments(task="listops", dataset=str(tmp_path / "ragged"), task_settings="max_length=30")
        )
    assert load_from_disk(str(tmp_path / "ragged"))["train"].num_rows == 10
    data["train"] = data["train"].cast_column("label", Value("int64"))
    data.save_to_disk(str(tmp_path / "plain"))
    with pytest.raises(ValueError, match="label must be a ClassLabel"):
        train_lra.load_data(train_lra.DataArguments(task="listops", dataset=str(tmp_path / "plain")))


def test_the_timer_leaves_out_warm_up_steps_and_evaluation(monkeypatch):
    clock = iter([0.0, 1.0, 3.0, 4.0, 14.0, 15.0, 17.0])
    monkeypatch.setattr(train_lra.time, "perf_counter", lambda: next(clock))
    timer = train_lra.StepTimer(warmup=1)
    timer.restart()  # t = 0
    timer.step_done()  # t = 1: the warm-up step, not timed
    timer.step_done()  # t = 3: a 2 s step
    timer.step_done()  # t = 4: a 1 s step
    timer.restart()  # t = 14: after a 10 s evaluation
    timer.step_done()  # t = 15: a 1 s step
    timer.step_done()  # t = 17: a 2 s step
    assert timer.summary() == {"steps_per_second": 4 / 6, "timed_steps": 4, "seconds": 6.0}


def test_the_script_is_a_task_of_hf_xcv_train():
    from hf_xcv.train import TASKS

    assert TASKS["lra"] == "hf_xcv.cli.train_lra"
    assert Path(train_lra.__file__).name == "train_lra.py"
