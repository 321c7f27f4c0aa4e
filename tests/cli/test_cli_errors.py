"""The command line reports a user's mistake in one line with exit status 2, an internal error with its traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
from datasets import ClassLabel, Dataset, DatasetDict

from hf_xcv import convert, train
from hf_xcv.cli.dispatch import dispatch
from hf_xcv.utils.errors import UsageError


def one_line_refusal(capsys, run, *argv: str) -> str:
    """Run the command in-process; it must exit 2 with exactly one line on stderr and no traceback. That line."""
    with pytest.raises(SystemExit) as exit_:
        run(list(argv))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_bad_option_value_is_one_line(capsys, tmp_path):
    line = one_line_refusal(capsys, train.main, "lra", "--task", "sorting", "--output_dir", str(tmp_path / "run"))
    assert line.startswith("hf-xcv-train lra: error: --task must be one of ['image', 'listops', 'pathfinder']")
    assert "--debug" in line
    assert not (tmp_path / "run").exists()


def test_a_missing_split_is_one_line(capsys, tmp_path):
    rows = {"input_ids": [[1, 2]], "attention_mask": [[1, 1]], "label": [0]}
    split = Dataset.from_dict(rows).cast_column("label", ClassLabel(names=["a", "b"]))
    DatasetDict(train=split, test=split).save_to_disk(tmp_path / "data")
    capsys.readouterr()  # the progress bars of building the data
    argv = ["lra", "--task", "listops", "--dataset", str(tmp_path / "data"), "--output_dir", str(tmp_path / "run")]
    line = one_line_refusal(capsys, train.main, *argv)
    assert line == (
        "hf-xcv-train lra: error: the listops data has no ['validation'] split(s); it has ['test', 'train'] "
        "(add --debug for the traceback)"
    )


def test_a_vocabulary_too_small_is_one_line(capsys, tmp_path):
    argv = ["tokenizer", "--builtin_numbers", "20", "--vocab_size", "10", "--output", str(tmp_path / "tok")]
    line = one_line_refusal(capsys, train.main, *argv)
    assert line.startswith("hf-xcv-train tokenizer: error: vocab_size must be an int above")


def test_a_missing_checkpoint_file_is_one_line(capsys, tmp_path):
    argv = ["swin", "--input", str(tmp_path / "missing.pth"), "--output", str(tmp_path / "out")]
    line = one_line_refusal(capsys, convert.main, *argv)
    assert line == (
        f"hf-xcv-convert swin: error: {tmp_path / 'missing.pth'}: no such file (add --debug for the traceback)"
    )


def test_a_missing_model_folder_is_one_line(capsys, tmp_path):
    argv = ["image-classification", "--model_name_or_path", str(tmp_path / "no-such-model"), "--max_train_steps", "1"]
    line = one_line_refusal(capsys, train.main, *argv, "--output_dir", str(tmp_path / "run"))
    assert line.startswith("hf-xcv-train image-classification: error: ") and "no-such-model" in line


def test_an_unknown_program_is_one_line(capsys):
    assert one_line_refusal(capsys, train.main, "segmentation").startswith(
        "hf-xcv-train: error: unknown program 'segmentation'; choose one of"
    )


def program(error: BaseException) -> types.ModuleType:
    module = types.ModuleType("fake_program")

    def main(argv):
        module.argv = argv
        raise error

    module.main = main
    return module


def run_fake(error: BaseException, *argv: str):
    module = program(error)
    dispatch("hf-xcv-train", {"fake": "fake"}, "usage", ["fake", *argv], lambda _: module)
    return module


def test_a_message_over_several_lines_is_printed_on_one(capsys):
    with pytest.raises(SystemExit) as exit_:
        run_fake(UsageError("the split is empty;\n  add images to it"))
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "hf-xcv-train fake: error: the split is empty; add images to it (add --debug for the traceback)\n"
    )


def test_an_internal_error_keeps_its_traceback():
    with pytest.raises(RuntimeError, match="a bug"):
        run_fake(RuntimeError("a bug"))
    with pytest.raises(ZeroDivisionError):
        run_fake(ZeroDivisionError())


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback_of_a_user_error(how, monkeypatch):
    argv = ["--x", "1"]
    if how == "flag":
        argv.append("--debug")
    else:
        monkeypatch.setenv("HF_XCV_DEBUG", "1")
    module = program(UsageError("bad value"))
    with pytest.raises(UsageError, match="bad value"):
        dispatch("hf-xcv-train", {"fake": "fake"}, "usage", ["fake", *argv], lambda _: module)
    assert module.argv == ["--x", "1"]  # --debug is the command's, not passed on to the program


def test_debug_prints_the_cause_of_a_programs_exit(capsys):
    try:
        raise ValueError("unreadable header")
    except ValueError as cause:
        exit_ = SystemExit("cannot convert")
        exit_.__cause__ = cause
    with pytest.raises(SystemExit):
        run_fake(exit_, "--debug")
    err = capsys.readouterr().err
    assert "Traceback" in err and "unreadable header" in err


def test_the_installed_command_exits_2_with_one_line_and_no_traceback(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HF_XCV_DEBUG", None)
    command = [sys.executable, "-m", "hf_xcv.train", "lra", "--task", "sorting", "--output_dir", str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "hf-xcv-train lra: error: --task must be one of ['image', 'listops', 'pathfinder'], got 'sorting' "
        "(add --debug for the traceback)"
    ]
    result = subprocess.run([*command, "--debug"], env=env, capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" in result.stderr and "UsageError" in result.stderr


def test_metrics_are_reachable_after_import_hf_xcv_and_load_lazily():
    code = (
        "import sys, hf_xcv; assert 'hf_xcv.metrics' not in sys.modules; "
        "from hf_xcv.metrics import detection; assert hf_xcv.metrics.detection is detection; print('ok')"
    )
    code_attr = "import hf_xcv; print(hf_xcv.metrics.__name__)"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == "ok\n"
    out = subprocess.run([sys.executable, "-c", code_attr], env=env, capture_output=True, text=True)
    assert out.stdout == "hf_xcv.metrics\n", out.stderr


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--max_train_steps", "-3"], "--max_train_steps must be an integer >= 1, got -3"),
        (["--per_device_train_batch_size", "0"], "--per_device_train_batch_size must be an integer >= 1, got 0"),
        (["--mixed_precision", "fp8"], "--mixed_precision must be one of ['no', 'fp16', 'bf16'], got 'fp8'"),
        (["--config_overrides", '{"num_queries": 5,}'], "--config_overrides is not a valid JSON object"),
        (["--config_overrides", "dropout=1.5"], "dropout must be a probability in [0, 1), got 1.5"),
        (["--config_overrides", "d_model=30"], "d_model=30 must be a multiple of 4"),
        (["--shortest_edge", "-5"], "size['shortest_edge'] must be a positive integer (pixels), got -5"),
        (["--backbone_checkpoint", "./no-such-resnet"], "./no-such-resnet: no such file or folder"),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_a_bad_setting_is_refused_in_one_line_before_training(option, message, capsys, tmp_path):
    argv = ["object-detection", "--preset", "detr-test-tiny", "--output_dir", str(tmp_path / "run"), *option]
    line = one_line_refusal(capsys, train.main, *argv)
    assert line.startswith(f"hf-xcv-train object-detection: error: {message}"), line
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_backbone_checkpoint_of_another_architecture_is_named(capsys, tmp_path):
    import hf_xcv

    hf_xcv.ViTForImageClassification(hf_xcv.preset_config("vit-test-tiny")).save_pretrained(tmp_path / "vit")
    capsys.readouterr()
    argv = ["object-detection", "--preset", "detr-test-tiny", "--backbone_checkpoint", str(tmp_path / "vit")]
    line = one_line_refusal(capsys, train.main, *argv, "--output_dir", str(tmp_path / "run"))
    assert f"{tmp_path / 'vit'} holds a 'xcv_vit' checkpoint; this detector's backbone is 'resnet'" in line
