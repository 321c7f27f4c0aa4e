"""training/train_object_detection.py: runs on the built-in scenes and on a COCO folder, resumes exactly, runs
data-parallel, trains DETR and Deformable DETR each with its own recipe and processor; and hf_xcv's detection
collator under transformers' Trainer."""

from __future__ import annotations

import json
import os
from functools import partial

import pytest
import torch
import yaml
from helpers import REPO_ROOT, accelerate_launcher, check, run_script
from safetensors.torch import load_file

SCRIPT = REPO_ROOT / "training" / "train_object_detection.py"
run = partial(run_script, SCRIPT)
# Small and quick: 24 scenes in batches of 8, 48-64 px, the tiny test DETR.
QUICK = [
    "--shapes_train_size", "24", "--per_device_train_batch_size", "8", "--eval_every_epochs", "0",
    "--disable_tqdm", "--preset", "detr-test-tiny", "--shortest_edge", "48", "--longest_edge", "64",
    "--pictures", "2",
]  # fmt: skip


@pytest.fixture(scope="module")
def module_env(tmp_path_factory):
    import os

    env = dict(os.environ)
    env["HF_HOME"] = str(tmp_path_factory.mktemp("hf-home"))
    return env


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, module_env):
    out = tmp_path_factory.mktemp("runs") / "shapes"
    check(run(["--output_dir", str(out), "--max_train_steps", "4", "--checkpointing_steps", "2", *QUICK], module_env))
    return out


def test_a_run_leaves_a_hub_ready_folder_with_map_in_its_card_and_pictures(finished_run):
    names = {p.name for p in finished_run.iterdir()}
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "README.md", "detections.png"} <= names
    results = json.loads((finished_run / "all_results.json").read_text())
    assert results["completed_steps"] == 4 and results["test"]["num_images"] == 200
    assert 0 <= results["test"]["map"] <= 1 and "map_50" in results["validation"]
    card = (finished_run / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["pipeline_tag"] == "object-detection"
    assert results["epochs"] == pytest.approx(4 / 3, abs=1e-4)  # 4 steps of 3 batches an epoch, not the recipe's 50
    assert f"| epochs | {results['epochs']} |" in card and "| max_train_steps | 4 |" in card
    assert "num_train_epochs" not in card
    metrics = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert metrics["map"] == pytest.approx(results["test"]["map"])
    processor = json.loads((finished_run / "preprocessor_config.json").read_text())
    assert processor["image_processor_type"] == "XcvDetrImageProcessor" and processor["size"]["shortest_edge"] == 48
    from PIL import Image

    assert Image.open(finished_run / "detections.png").size[0] > 256  # two upscaled tiles side by side

    from transformers import AutoImageProcessor, AutoModelForObjectDetection

    import hf_xcv  # noqa: F401  (registers the model type)

    model = AutoModelForObjectDetection.from_pretrained(finished_run)
    assert type(model).__name__ == "DetrForObjectDetection" and model.config.id2label[0] == "circle"
    assert type(AutoImageProcessor.from_pretrained(finished_run)).__name__ == "XcvDetrImageProcessor"


def test_recipe_groups_and_step_decay():
    from hf_xcv.cli import train_object_detection as script

    model = script.build_model(script.ModelArguments(preset="detr-test-tiny"), ["a", "b"])
    args = script.TrainArguments(output_dir="unused")
    optimizer, scheduler = script.build_optimizer(model, args, total_steps=30)
    transformer, backbone = optimizer.param_groups
    assert transformer["lr"] == 1e-4 and backbone["lr"] == 1e-5 and transformer["weight_decay"] == 1e-4
    names = {id(p): n for n, p in model.named_parameters()}
    assert all("backbone" in names[id(p)] for p in backbone["params"])
    assert not any(p.requires_grad is False for group in optimizer.param_groups for p in group["params"])
    for _ in range(20):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-5)  # /10 after 2/3 of the run


def test_deformable_recipe_groups_offsets_and_reference_points_at_a_tenth_and_drops_later():
    """The original Deformable DETR: lr 2e-4, backbone 2e-5, sampling offsets and reference points at 0.1x lr,
    weight decay 1e-4, lr / 10 after 40 of 50 epochs; set rates win over the recipe's."""
    from hf_xcv.cli import train_object_detection as script

    model = script.build_model(script.ModelArguments(preset="deformable-detr-test-tiny"), ["a", "b"])
    optimizer, scheduler = script.build_optimizer(model, script.TrainArguments(output_dir="unused"), total_steps=30)
    transformer, backbone, linear_proj = optimizer.param_groups
    assert (transformer["lr"], backbone["lr"], linear_proj["lr"]) == pytest.approx((2e-4, 2e-5, 2e-5))
    assert {group["weight_decay"] for group in optimizer.param_groups} == {1e-4}
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(names[id(p)].startswith("model.backbone.") for p in backbone["params"])
    projections = {names[id(p)] for p in linear_proj["params"]}
    assert "model.reference_points.weight" in projections
    assert "model.encoder.layers.0.self_attn.sampling_offsets.weight" in projections
    assert "model.decoder.layers.1.encoder_attn.sampling_offsets.bias" in projections
    assert all("sampling_offsets" in n or "reference_points" in n for n in projections)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert sum(len(group["params"]) for group in optimizer.param_groups) == len(trained)  # each once
    for _ in range(24):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(2e-4)
        optimizer.step()
        scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([2e-5, 2e-6, 2e-6])  # /10 after 0.8 of it

    set_rates = script.TrainArguments(output_dir="unused", learning_rate=1e-3, lr_linear_proj_mult=0.5)
    optimizer, _ = script.build_optimizer(model, set_rates, total_steps=30)
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([1e-3, 2e-5, 5e-4])
    detr = script.build_model(script.ModelArguments(), ["a"])  # detr-shapes: the DETR recipe, two groups
    assert [g["lr"] for g in script.build_optimizer(detr, set_rates, 30)[0].param_groups] == [1e-3, 1e-5]


def test_the_model_type_comes_from_the_preset_or_the_checkpoints_config(tmp_path):
    from hf_xcv.cli import train_object_detection as script

    assert script.model_type_of(script.ModelArguments()) == "xcv_detr"
    assert script.model_type_of(script.ModelArguments(preset="deformable-detr-shapes")) == "xcv_deformable_detr"
    for model_type in ("deformable_detr", "xcv_deformable_detr", "detr"):  # transformers' types convert on load
        (tmp_path / model_type).mkdir()
        (tmp_path / model_type / "config.json").write_text(json.dumps({"model_type": model_type}))
        found = script.model_type_of(script.ModelArguments(model_name_or_path=str(tmp_path / model_type)))
        assert found == ("xcv_detr" if model_type == "detr" else "xcv_deformable_detr")
    with pytest.raises(ValueError, match="makes a xcv_vit model.*deformable-detr-shapes"):
        script.model_type_of(script.ModelArguments(preset="vit-test-tiny"))
    (tmp_path / "vit").mkdir()
    (tmp_path / "vit" / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(ValueError, match="model_type 'vit'"):
        script.model_type_of(script.ModelArguments(model_name_or_path=str(tmp_path / "vit")))
    with pytest.raises(ValueError, match="not both"):
        script.model_type_of(script.ModelArguments(preset="detr-shapes", model_name_or_path=str(tmp_path / "vit")))


def test_deformable_detr_learns_with_its_recipe_and_scores_with_sigmoid_top_k():
    """A few steps of the script's model, processor and optimizer on one batch lower the loss; its predictions
    (what mAP is computed from) are the top (query, class) pairs of sigmoid scores, not one per query."""
    from accelerate import Accelerator

    from hf_xcv.cli import train_object_detection as script
    from hf_xcv.data import detection_label_names, load_shapes_dataset
    from hf_xcv.data.detection import DetectionCollator, detection_transform

    data = load_shapes_dataset(8, 2, 2, image_size=(48, 64))
    labels = detection_label_names(data)
    torch.manual_seed(0)
    model = script.build_model(script.ModelArguments(preset="deformable-detr-test-tiny"), labels)
    data_args = script.DataArguments(shortest_edge=48, longest_edge=64)
    processor = script.build_processor(data_args, len(labels), "xcv_deformable_detr")
    assert type(processor).__name__ == "XcvDeformableDetrImageProcessor" and processor.class_activation == "sigmoid"
    train = data["train"].with_transform(detection_transform(processor))
    batch = DetectionCollator(processor)([train[i] for i in range(len(train))])
    optimizer, scheduler = script.build_optimizer(model, script.TrainArguments(output_dir="unused"), 100)
    model.train()
    losses = []
    for _ in range(6):
        loss = model(pixel_values=batch["pixel_values"], pixel_mask=batch["pixel_mask"], labels=batch["labels"]).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] and all(b < a for a, b in zip(losses, losses[1:])), losses

    loader = torch.utils.data.DataLoader(train, 4, collate_fn=DetectionCollator(processor))
    predictions, references = script.predict(Accelerator(cpu=True), model, processor, loader)
    pairs = model.config.num_queries * len(labels)  # fewer than the top 100: every pair is kept at threshold 0
    assert len(references) == 8 and {len(p["scores"]) for p in predictions} == {pairs}
    assert all(0 <= s <= 1 for p in predictions for s in p["scores"])


def test_deformable_detr_trains_by_preset_and_reloads_with_its_processor(module_env, tmp_path):
    """The deformable run leaves the same Hub-ready folder: its processor (sigmoid top-k), a card that names it,
    the recipe's rates in the run record; and it starts from the backbone weights a DETR preset of the same ResNet
    was given."""
    import transformers

    import hf_xcv

    backbone = hf_xcv.preset_config("detr-test-tiny").backbone_config.to_dict()  # the same ResNet, stage 4 only
    resnet = transformers.ResNetForImageClassification(transformers.ResNetConfig(**backbone))
    resnet.save_pretrained(tmp_path / "resnet")
    out = tmp_path / "deformable"
    quick = [*QUICK[: QUICK.index("--preset")], *QUICK[QUICK.index("--preset") + 2 :]]
    # three levels: the tiny model's fourth (stride 64) is 1x1 at 48 px, too small for a single picture's GroupNorm
    check(run(["--output_dir", str(out), "--max_train_steps", "2", "--preset", "deformable-detr-test-tiny",
               "--backbone_checkpoint", str(tmp_path / "resnet"), "--config_overrides", "num_feature_levels=3",
               *quick], module_env))  # fmt: skip
    assert {"model.safetensors", "preprocessor_config.json", "README.md", "detections.png"} <= set(os.listdir(out))
    processor = json.loads((out / "preprocessor_config.json").read_text())
    assert processor["image_processor_type"] == "XcvDeformableDetrImageProcessor"
    train = json.loads((out / "xcv_run.json").read_text())["train"]
    assert (train["learning_rate"], train["lr_backbone"], train["lr_drop"]) == (2e-4, 2e-5, 0.8)
    card = (out / "README.md").read_text()
    assert "**Deformable DETR** object detector (Zhu et al. 2020)" in card and "sigmoid" in card
    stem = "embedder.embedder.convolution.weight"
    assert torch.equal(
        load_file(out / "model.safetensors")[f"model.backbone.model.{stem}"], resnet.resnet.state_dict()[stem]
    )

    from transformers import AutoImageProcessor, AutoModelForObjectDetection

    model = AutoModelForObjectDetection.from_pretrained(out)
    assert type(model).__name__ == "DeformableDetrForObjectDetection" and model.config.num_feature_levels == 3
    assert type(AutoImageProcessor.from_pretrained(out)).__name__ == "XcvDeformableDetrImageProcessor"
    results = json.loads((out / "all_results.json").read_text())
    assert results["completed_steps"] == 2 and 0 <= results["test"]["map"] <= 1


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(module_env, tmp_path):
    """Stop after 5 steps (checkpoints every 2), resume to 8: crosses epoch boundaries with augmentation and
    dropout drawing random numbers."""
    common = [*QUICK, "--max_train_steps", "8", "--checkpointing_steps", "2", "--pictures", "0",
              "--config_overrides", "dropout=0.1,attention_dropout=0.1,activation_dropout=0.1"]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    check(run(["--output_dir", str(straight), *common], module_env))
    check(run(["--output_dir", str(resumed), "--stop_after_steps", "5", *common], module_env))
    assert not (resumed / "model.safetensors").exists()
    log = check(run(["--output_dir", str(resumed), "--resume_from_checkpoint", "latest", *common], module_env))
    assert "resumed from" in log.stdout
    a, b = load_file(straight / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_a_coco_folder_trains_and_two_processes_gather_every_image_once(module_env, tmp_path):
    from hf_xcv.data import load_shapes_dataset, write_coco_detection

    write_coco_detection(load_shapes_dataset(24, 10, 12, seed=1), tmp_path / "coco")
    out = tmp_path / "ddp"
    args = ["--output_dir", str(out), "--dataset", str(tmp_path / "coco"), "--max_train_steps", "2", *QUICK]
    check(run(args, module_env, accelerate_launcher(2)))
    results = json.loads((out / "all_results.json").read_text())
    assert results["world_size"] == 2
    assert results["test"]["num_images"] == 12 and results["validation"]["num_images"] == 10  # no duplicates


def test_imagenet_style_backbone_weights_load_and_the_frozen_stem_stays_as_loaded(module_env, tmp_path):
    """--backbone_checkpoint: the original recipe (frozen BatchNorm, stem and stage 1 frozen) on loaded weights."""
    import transformers

    import hf_xcv

    backbone = hf_xcv.preset_config("detr-test-tiny").backbone_config.to_dict()
    resnet = transformers.ResNetForImageClassification(transformers.ResNetConfig(**backbone))
    resnet.save_pretrained(tmp_path / "resnet")
    out = tmp_path / "run"
    check(run(["--output_dir", str(out), "--max_train_steps", "2", "--backbone_checkpoint", str(tmp_path / "resnet"),
               *QUICK], module_env))  # fmt: skip
    trained = load_file(out / "model.safetensors")
    pretrained = resnet.resnet.state_dict()
    stem = "embedder.embedder.convolution.weight"
    assert torch.equal(trained[f"model.backbone.model.{stem}"], pretrained[stem])  # frozen, as loaded
    assert torch.equal(trained[f"model.backbone.model.{stem[:-18]}normalization.running_var"],
                       pretrained[f"{stem[:-18]}normalization.running_var"])  # fmt: skip
    last = "encoder.stages.3.layers.0.layer.0.convolution.weight"
    assert not torch.equal(trained[f"model.backbone.model.{last}"], pretrained[last])  # trained at lr_backbone
    assert json.loads((out / "config.json").read_text())["freeze_batch_norm"] is True


def test_a_bad_dataset_is_refused_before_anything_is_written(module_env, tmp_path):
    out = tmp_path / "run"
    result = run(["--output_dir", str(out), "--dataset", str(tmp_path / "nothing-here"), *QUICK], module_env)
    assert result.returncode != 0 and "nothing-here" in result.stderr
    assert not out.exists()


def test_trainer_trains_a_detr_with_the_detection_collator(tmp_path):
    from transformers import Trainer, TrainingArguments

    import hf_xcv
    from hf_xcv.data import load_shapes_dataset
    from hf_xcv.data.detection import DetectionCollator, detection_transform

    data = load_shapes_dataset(16, 4, 4, image_size=(48, 64))
    processor = hf_xcv.XcvDetrImageProcessor(size={"shortest_edge": 48, "longest_edge": 64}, num_labels=4)
    model = hf_xcv.DetrForObjectDetection(hf_xcv.preset_config("detr-test-tiny", num_labels=4))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, remove_unused_columns=False,
        report_to=[], use_cpu=True, save_strategy="no", logging_steps=1,
    )  # fmt: skip
    train = data["train"].with_transform(detection_transform(processor, augment=True, seed=0))
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=DetectionCollator(processor))
    result = trainer.train()
    assert result.global_step == 3 and torch.isfinite(torch.tensor(result.training_loss))
    moved = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(before[n], p)]
    assert len(moved) > len(before) // 2


# ----------------------------------------------------------------------------------------------------------------
# detection datasets as users have them, run in this process (a few steps of the tiny DETR on a few images)

TINY = [
    "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4", "--eval_every_epochs", "0",
    "--disable_tqdm", "--preset", "detr-test-tiny", "--shortest_edge", "48", "--longest_edge", "64",
]  # fmt: skip
HUB_NAMES = ["Coverall", "Face_Shield", "Gloves"]


def _hub_dataset(**splits: int):
    """A DatasetDict in the layout of the Hub's detection datasets (cppe-5): ``objects`` a Sequence of a dict with
    a ClassLabel category; ``splits`` maps a split name to its number of 40x50 images, two boxes each."""
    import numpy as np
    import PIL.Image
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Image, Sequence, Value

    box = {"id": Value("int64"), "area": Value("int64"), "bbox": Sequence(Value("float32"), length=4),
           "category": ClassLabel(names=HUB_NAMES)}  # fmt: skip
    features = Features({"image_id": Value("int64"), "image": Image(), "width": Value("int32"),
                         "height": Value("int32"), "objects": Sequence(box)})  # fmt: skip
    rng = np.random.default_rng(0)
    data = {}
    for k, (name, count) in enumerate(splits.items()):
        ids = [100 * k + i for i in range(count)]
        rows = {
            "image_id": ids,
            "image": [PIL.Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)) for _ in ids],
            "width": [50] * count,
            "height": [40] * count,
            "objects": [{"id": [1, 2], "area": [120, 64], "bbox": [[2, 3, 12, 10], [30, 20, 8, 8]], "category": [0, 2]}
                        for _ in ids],
        }  # fmt: skip
        data[name] = Dataset.from_dict(rows, features=features)
    return DatasetDict(data)


def test_a_hub_layout_dataset_trains_measures_on_its_test_split_and_the_card_lists_its_classes(tmp_path, capsys):
    """cppe-5's layout, saved with save_to_disk (the offline stand-in for its Hub id): train and test splits only."""
    from hf_xcv.cli import train_object_detection as script

    _hub_dataset(train=4, test=2).save_to_disk(str(tmp_path / "cppe-5"))
    out = tmp_path / "run"
    results = script.main(["--dataset", str(tmp_path / "cppe-5"), "--output_dir", str(out), "--max_train_steps", "2",
                           "--pictures", "2", *TINY])  # fmt: skip
    assert "training on split 'train', measuring mAP on 'test' (the dataset has no validation split)" in (
        capsys.readouterr().out
    )
    assert results["completed_steps"] == 2 and results["test"]["num_images"] == 2 and "validation" not in results
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "Coverall", "1": "Face_Shield", "2": "Gloves"}
    assert config["label2id"] == {"Coverall": 0, "Face_Shield": 1, "Gloves": 2}
    assert "It detects 3 classes: Coverall, Face_Shield, Gloves." in (out / "README.md").read_text()
    assert (out / "detections.png").is_file()
    processor = json.loads((out / "preprocessor_config.json").read_text())
    assert processor["resize_rounding"] == "original"  # the saved config says which rounding it resizes with


def test_a_coco_folder_with_a_val_split_and_category_ids_1_and_3(tmp_path, capsys):
    """COCO's layout with splits train / val / test and ids {1, 3}: the class index is the category id (4 classes),
    label2id holds the two real ones, and a prediction of an unused id is named in the pipeline."""
    import PIL.Image
    from transformers import AutoImageProcessor, AutoModelForObjectDetection, pipeline

    from hf_xcv.cli import train_object_detection as script

    root = tmp_path / "coco"
    (root / "annotations").mkdir(parents=True)
    categories = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
    for k, split in enumerate(("train", "val", "test")):
        (root / split).mkdir()
        images, annotations = [], []
        for i in range(2):
            image_id = 10 * k + i
            PIL.Image.new("RGB", (50, 40), (40 * i, 90, 200)).save(root / split / f"{image_id}.png")
            images.append({"id": image_id, "file_name": f"{image_id}.png", "width": 50, "height": 40})
            annotations += [
                {"id": 2 * image_id + 1, "image_id": image_id, "category_id": 1, "bbox": [2, 3, 20, 10], "area": 200,
                 "iscrowd": 0},
                {"id": 2 * image_id + 2, "image_id": image_id, "category_id": 3, "bbox": [25, 15, 20, 20],
                 "area": 400, "iscrowd": 0},
            ]  # fmt: skip
        coco = {"images": images, "annotations": annotations, "categories": categories}
        (root / "annotations" / f"instances_{split}.json").write_text(json.dumps(coco))
    out = tmp_path / "run"
    results = script.main(["--dataset", str(root), "--output_dir", str(out), "--max_train_steps", "1",
                           "--pictures", "0", *TINY])  # fmt: skip
    assert "measuring mAP on 'val', the card's results on 'test'" in capsys.readouterr().out
    assert results["val"]["num_images"] == 2 and results["test"]["num_images"] == 2
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "N/A (0)", "1": "person", "2": "N/A (2)", "3": "car"}
    assert config["label2id"] == {"person": 1, "car": 3}
    assert "It detects 2 classes: person, car." in (out / "README.md").read_text()

    model = AutoModelForObjectDetection.from_pretrained(out).eval()
    assert model.config.num_labels == 4 and model.class_labels_classifier.out_features == 5  # + no object
    with torch.no_grad():
        model.class_labels_classifier.bias[2] = 100.0  # every query: the unused id 2
    detector = pipeline("object-detection", model=model, image_processor=AutoImageProcessor.from_pretrained(out))
    found = detector(PIL.Image.new("RGB", (50, 40)), threshold=0.5)
    assert found and {item["label"] for item in found} == {"N/A (2)"}


def test_an_image_folder_with_a_metadata_jsonl_per_split_trains(tmp_path):
    import PIL.Image

    from hf_xcv.cli import train_object_detection as script

    for split, count in (("train", 3), ("valid", 2)):
        folder = tmp_path / "folder" / split
        folder.mkdir(parents=True)
        lines = []
        for i in range(count):
            PIL.Image.new("RGB", (50, 40), (60 * i, 30, 90)).save(folder / f"{i}.jpg")
            lines.append({"file_name": f"{i}.jpg", "objects": {"bbox": [[1, 2, 20, 15]], "category": ["dog"]}})
        lines[0]["objects"] = {"bbox": [[1, 2, 20, 15], [25, 10, 10, 10]], "category": ["cat", "dog"]}
        (folder / "metadata.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "run"
    results = script.main(["--dataset", str(tmp_path / "folder"), "--output_dir", str(out), "--max_train_steps", "1",
                           "--pictures", "0", *TINY])  # fmt: skip
    assert results["valid"]["num_images"] == 2
    assert json.loads((out / "config.json").read_text())["label2id"] == {"cat": 0, "dog": 1}


def test_malformed_rows_and_missing_splits_are_refused_before_anything_is_written(tmp_path):
    from datasets import DatasetDict, Sequence, Value

    from hf_xcv.cli import train_object_detection as script
    from hf_xcv.utils.errors import UsageError

    data = _hub_dataset(train=2, validation=2)
    train = data["train"].cast_column("objects", {**data["train"].features["objects"],
                                                  "bbox": Sequence(Sequence(Value("float32")))})  # fmt: skip
    rows = train.to_dict()
    rows["objects"][1] = {"id": [1], "area": [1], "bbox": [[1.0, 2.0, 3.0]], "category": [1]}
    bad = DatasetDict(train=train.from_dict(rows, features=train.features), validation=data["validation"])
    bad.save_to_disk(str(tmp_path / "bad"))
    out = tmp_path / "run"
    bad_row = r"(?s)split 'train' of .*bad has 1 bad row\(s\).*image_id 1: object 0 has bbox"
    with pytest.raises(UsageError, match=bad_row):
        script.main(["--dataset", str(tmp_path / "bad"), "--output_dir", str(out), *TINY])
    assert not out.exists()

    DatasetDict(train=data["train"]).save_to_disk(str(tmp_path / "train-only"))
    with pytest.raises(UsageError, match=r"no validation or test split to measure mAP on; its splits: \['train'\]"):
        script.main(["--dataset", str(tmp_path / "train-only"), "--output_dir", str(out), *TINY])
    with pytest.raises(UsageError, match=r"has no split 'dev'"):
        script.main(["--dataset", str(tmp_path / "bad"), "--eval_split", "dev", "--output_dir", str(out), *TINY])
    assert not out.exists()


def test_trainer_trains_a_detr_on_a_hub_layout_dataset(tmp_path):
    from transformers import Trainer, TrainingArguments

    import hf_xcv
    from hf_xcv.data.detection import DetectionCollator, detection_transform

    data = _hub_dataset(train=4)
    processor = hf_xcv.XcvDetrImageProcessor(size={"shortest_edge": 48, "longest_edge": 64}, num_labels=3)
    model = hf_xcv.DetrForObjectDetection(hf_xcv.preset_config("detr-test-tiny", num_labels=3))
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, remove_unused_columns=False,
        report_to=[], use_cpu=True, save_strategy="no",
    )  # fmt: skip
    train = data["train"].with_transform(detection_transform(processor, augment=True, seed=0))
    result = Trainer(model=model, args=args, train_dataset=train, data_collator=DetectionCollator(processor)).train()
    assert result.global_step == 2 and torch.isfinite(torch.tensor(result.training_loss))


def _coco_with_bad_data(root) -> None:
    """A COCO folder: train has a truncated PNG (image 2) and a zero-area box (annotation 11 of image 1); val is
    fine."""
    import PIL.Image

    (root / "annotations").mkdir(parents=True)
    for split, ids in (("train", (1, 2, 3)), ("val", (7,))):
        (root / split).mkdir()
        images, annotations = [], []
        for image_id in ids:
            path = root / split / f"{image_id}.png"
            PIL.Image.effect_noise((50, 40), 60).convert("RGB").save(path)
            if image_id == 2:
                path.write_bytes(path.read_bytes()[:200])  # truncated: the header reads, the pixels do not
            images.append({"id": image_id, "file_name": path.name, "width": 50, "height": 40})
            annotations.append({"id": 10 * image_id, "image_id": image_id, "category_id": 0, "bbox": [2, 3, 20, 10]})
        if split == "train":
            annotations.append({"id": 11, "image_id": 1, "category_id": 0, "bbox": [5, 5, 0, 10]})
        coco = {"images": images, "annotations": annotations, "categories": [{"id": 0, "name": "thing"}]}
        (root / "annotations" / f"instances_{split}.json").write_text(json.dumps(coco))


def test_bad_data_is_refused_whole_before_the_run_folder_is_claimed_or_dropped_and_counted(tmp_path, capsys):
    from hf_xcv.cli import train_object_detection as script
    from hf_xcv.utils.errors import UsageError

    _coco_with_bad_data(tmp_path / "coco")
    out = tmp_path / "run"
    args = ["--dataset", str(tmp_path / "coco"), "--output_dir", str(out), "--max_train_steps", "1", "--pictures",
            "0", *TINY]  # fmt: skip
    with pytest.raises(UsageError) as caught:
        script.main(args)
    message = str(caught.value)
    assert "has 2 bad row(s) (2 problem(s))" in message and "--drop_invalid_annotations" in message
    assert "image_id 2: does not decode" in message
    assert f"file {(tmp_path / 'coco' / 'train' / '2.png').resolve()}]" in message
    assert "image_id 1: object 1 has bbox [5.0, 5.0, 0.0, 10.0]" in message and "[annotation 11, file" in message
    assert not out.exists()

    results = script.main([*args, "--drop_invalid_annotations"])
    assert "dropped 1 annotation and 1 image (--drop_invalid_annotations)" in capsys.readouterr().out
    assert results["data"] == {"dropped_annotations": 1, "dropped_images": 1}
    assert json.loads((out / "all_results.json").read_text())["data"] == results["data"]
    card = (out / "README.md").read_text()
    assert "Dropped before training (--drop_invalid_annotations): 1 annotation, 1 image." in card
