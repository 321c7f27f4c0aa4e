"""Fine-tuning with transformers' Trainer, through the processor, hf_xcv's collator and metric."""

from __future__ import annotations

import numpy as np
from transformers import Trainer, TrainingArguments

import hf_xcv
from hf_xcv.data import ImageClassificationCollator, image_classification_transform, load_digits_dataset
from hf_xcv.metrics import Accuracy


def compute_metrics(prediction) -> dict[str, float]:
    logits, labels = prediction.predictions, prediction.label_ids
    return Accuracy().compute(predictions=np.argmax(logits, axis=-1), references=labels)


def test_trainer_fine_tunes_vit_on_digits(tmp_path):
    digits = load_digits_dataset()
    config = hf_xcv.preset_config("vit-test-tiny", num_labels=10, image_size=8, patch_size=2)
    model = hf_xcv.ViTForImageClassification(config)
    processor = hf_xcv.XcvViTImageProcessor(size={"height": 8, "width": 8})
    transform = image_classification_transform(processor)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=32,
        per_device_eval_batch_size=128,
        max_steps=300,
        learning_rate=3e-3,
        warmup_steps=10,
        weight_decay=0.01,
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        remove_unused_columns=False,  # the transform needs the image column
        seed=0,
        logging_steps=50,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=digits["train"].with_transform(transform),
        eval_dataset=digits["validation"].with_transform(transform),
        data_collator=ImageClassificationCollator(),
        compute_metrics=compute_metrics,
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < before["eval_loss"] - 1.0
    assert after["eval_accuracy"] > 0.6  # chance is 0.1
    trainer.save_model(str(tmp_path / "final"))
    reloaded = hf_xcv.ViTForImageClassification.from_pretrained(tmp_path / "final")
    assert reloaded.config.num_labels == 10


def test_trainer_fine_tunes_swin_with_the_recipe_parameter_groups(tmp_path):
    import torch

    from hf_xcv.training import parameter_groups

    digits = load_digits_dataset()
    model = hf_xcv.SwinForImageClassification(hf_xcv.preset_config("swin-test-tiny", num_labels=10, image_size=8))
    processor = hf_xcv.XcvSwinImageProcessor.for_image_size((8, 8))
    transform = image_classification_transform(processor)
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.05), lr=3e-3)
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=32, per_device_eval_batch_size=128, max_steps=200,
        warmup_steps=10, eval_strategy="no", save_strategy="no", report_to="none", use_cpu=True,
        remove_unused_columns=False, seed=0,
    )  # fmt: skip
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=digits["train"].with_transform(transform),
        eval_dataset=digits["validation"].with_transform(transform),
        data_collator=ImageClassificationCollator(),
        compute_metrics=compute_metrics,
        optimizers=(optimizer, None),
    )
    tables = [p for n, p in model.named_parameters() if n.endswith("relative_position_bias_table")]
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < before["eval_loss"] - 0.5
    assert after["eval_accuracy"] > 0.5  # chance is 0.1
    exempt = next(g for g in trainer.optimizer.param_groups if g["weight_decay"] == 0.0)
    assert tables and all(any(t is p for p in exempt["params"]) for t in tables)
