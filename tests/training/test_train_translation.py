"""training/train_translation.py: runs, reloads through the Auto classes, resumes exactly, runs data-parallel.

Its folder guards are tested with the other scripts' in test_training_scripts.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial

import pytest
import torch
import yaml
from helpers import REPO_ROOT, accelerate_launcher, check, run_python, run_script
from huggingface_hub import HfApi
from safetensors.torch import load_file

REPO = REPO_ROOT
run = partial(run_script, REPO / "training" / "train_translation.py")
SAMPLES = REPO / "scripts" / "translate_samples.py"
HUB_REPO = "testuser/numbers-from-script"
# Small and quick: 240 training pairs, 16 validation and 37 test pairs (37 is no multiple of any batch size below,
# so the last evaluation batch is short, and uneven across two processes); an untrained model decodes to the limit.
QUICK = [
    "--preset", "transformer-test-tiny", "--train_size", "240", "--validation_size", "16", "--test_size", "37",
    "--tokenizer_vocab_size", "300", "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "8",
    "--max_new_tokens", "8", "--warmup_steps", "4", "--disable_tqdm",
]  # fmt: skip


@pytest.fixture(scope="module")
def module_env(tmp_path_factory):
    env = dict(os.environ)
    env["HF_HOME"] = str(tmp_path_factory.mktemp("hf-home"))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    # One thread per process: the tiny model gains nothing from more, and spinning threads of two processes (or of
    # a busy machine) sharing cores slow every step down many times over.
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, module_env):
    out = tmp_path_factory.mktemp("runs") / "numbers"
    args = ["--output_dir", str(out), "--max_train_steps", "6", "--checkpointing_steps", "3", *QUICK]
    check(run([*args, "--push_to_hub", "--hub_model_id", HUB_REPO], module_env))  # to the tests' local Hub
    return out


def test_a_run_leaves_a_hub_ready_folder_with_scores_and_a_model_card(finished_run):
    names = {p.name for p in finished_run.iterdir()}
    assert {
        "config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "README.md", "all_results.json",
    } <= names  # fmt: skip
    assert not any(name.startswith(".") for name in names)
    results = json.loads((finished_run / "all_results.json").read_text())
    assert results["world_size"] == 1 and results["completed_steps"] == 6
    assert results["test"]["num_samples"] == 37 and results["validation"]["num_samples"] == 16
    assert results["test"]["examples"][0]["source"]  # source, reference and hypothesis of a few test pairs
    meta = yaml.safe_load((finished_run / "README.md").read_text().split("---")[1])
    assert meta["pipeline_tag"] == "translation" and meta["language"] == ["en", "fr"]
    assert {"hf_xcv", "xcv_transformer", "translation"} <= set(meta["tags"])
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert metrics == pytest.approx({"bleu": results["test"]["bleu"], "chrf": results["test"]["chrf"]})
    generation = json.loads((finished_run / "generation_config.json").read_text())
    assert generation["num_beams"] == 4 and generation["max_new_tokens"] == 8
    assert (finished_run / "checkpoints" / "LATEST").read_text().strip() == "step-00000006"
    # truncation=True cuts to the positions of the model the tokenizer is saved with
    positions = json.loads((finished_run / "config.json").read_text())["max_position_embeddings"]
    assert json.loads((finished_run / "tokenizer_config.json").read_text())["model_max_length"] == positions


def test_the_pushed_repo_holds_the_model_files_and_no_run_state(finished_run):
    names = set(HfApi().list_repo_files(HUB_REPO))
    assert {"README.md", "model.safetensors", "generation_config.json", "tokenizer.json", "all_results.json"} <= names
    assert not any(name.startswith("checkpoints") or name == "xcv_run.json" for name in names)


def test_the_folder_reloads_through_the_auto_classes_in_a_fresh_process(finished_run, module_env):
    result = run_python(
        f"""
        import hf_xcv
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained({str(finished_run)!r})
        model = AutoModelForSeq2SeqLM.from_pretrained({str(finished_run)!r})
        vocab = len(tokenizer)
        assert type(model).__name__ == "TransformerForConditionalGeneration" and model.config.vocab_size == vocab
        out = model.generate(**tokenizer(["two hundred and five"], return_tensors="pt"))
        assert out.shape[0] == 1 and out.shape[1] <= 1 + 8  # the start token and at most max_new_tokens
        print(type(tokenizer).__name__)
        """,
        module_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TransformerTokenizerFast" in result.stdout


def test_translate_samples_scores_the_held_out_split_and_enforces_a_minimum(finished_run, module_env):
    result = subprocess.run(
        [sys.executable, str(SAMPLES), str(finished_run), "--min_bleu", "101"], env=module_env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert "reloaded model on the 37 held-out en->fr pairs" in result.stdout, result.stderr[-3000:]
    assert result.returncode != 0 and "is below 101" in result.stderr


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(module_env, tmp_path):
    """Stop after 7 steps (checkpoints every 3: the last is step 6, mid-epoch), resume to 9; crosses epoch boundaries
    (8 batches of 32 accumulated in pairs: 4 steps an epoch), with dropout, and with evaluations during training."""
    common = [
        "--max_train_steps", "9", "--checkpointing_steps", "3", "--gradient_accumulation_steps", "2",
        "--eval_steps", "3", "--config_overrides", "dropout=0.2,attention_dropout=0.1", *QUICK,
    ]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    log = check(run(["--output_dir", str(straight), *common], module_env))
    assert "step 3: validation BLEU" in log.stdout and "step 9: validation BLEU" in log.stdout
    check(run(["--output_dir", str(resumed), "--stop_after_steps", "7", *common], module_env))
    assert not (resumed / "model.safetensors").exists()  # stopped like a killed run: no final model
    assert (resumed / "checkpoints" / "LATEST").read_text().strip() == "step-00000006"
    tokenizer = (resumed / "checkpoints" / "tokenizer" / "tokenizer.json").stat().st_mtime_ns
    log = check(run(["--output_dir", str(resumed), "--resume_from_checkpoint", "latest", *common], module_env))
    assert "resumed from" in log.stdout and "step 6" in log.stdout
    assert (resumed / "checkpoints" / "tokenizer" / "tokenizer.json").stat().st_mtime_ns == tokenizer  # reused
    assert json.loads((straight / "config.json").read_text())["dropout"] == 0.2
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    scores = [json.loads((run / "all_results.json").read_text())["test"] for run in (straight, resumed)]
    assert scores[0] == scores[1]


def test_two_process_data_parallel_run_scores_every_test_pair_once(module_env, tmp_path):
    """`accelerate launch --multi_gpu --num_processes 2` starts two gloo processes on a CPU machine."""
    out = tmp_path / "ddp"
    args = ["--output_dir", str(out), "--max_train_steps", "3", "--checkpointing_steps", "3", *QUICK]
    check(run(args, module_env, accelerate_launcher(2)))
    results = json.loads((out / "all_results.json").read_text())
    assert results["world_size"] == 2
    # 37 pairs in batches of 8 over two processes: accelerate repeats pairs to even out the batches, and the
    # gather drops them again (the script also checks that every row index came back exactly once).
    assert results["test"]["num_samples"] == 37 and results["validation"]["num_samples"] == 16
    assert {p.name for p in (out / "checkpoints" / "step-00000003").glob("random_states_*")} == {
        "random_states_0.pkl",
        "random_states_1.pkl",
    }
