"""The Transformer under transformers' Trainer and Seq2SeqTrainer (predict_with_generate), unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
    TrainingArguments,
)

import hf_xcv
from hf_xcv.data import load_number_translation_dataset, tokenize_translation_batch
from hf_xcv.metrics import Bleu, ChrF
from hf_xcv.training import get_noam_schedule


@pytest.fixture(scope="module")
def prepared():
    data = load_number_translation_dataset(train_size=400, validation_size=24, test_size=24, max_number=999)
    texts = [pair[lang] for pair in data["train"]["translation"] for lang in ("en", "fr")]
    tokenizer = hf_xcv.train_tokenizer(texts, vocab_size=400)
    columns = data["train"].column_names
    tokenized = data.map(
        tokenize_translation_batch,
        batched=True,
        remove_columns=columns,
        fn_kwargs=dict(tokenizer=tokenizer, source_lang="en", target_lang="fr"),
    )
    return tokenizer, tokenized


def new_model(tokenizer) -> hf_xcv.TransformerForConditionalGeneration:
    torch.manual_seed(0)
    config = hf_xcv.preset_config("transformer-test-tiny", vocab_size=len(tokenizer), d_model=64, encoder_ffn_dim=128)
    return hf_xcv.TransformerForConditionalGeneration(config)


def test_trainer_with_the_papers_schedule_lowers_the_loss(prepared, tmp_path):
    tokenizer, data = prepared
    model = new_model(tokenizer)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    schedule = get_noam_schedule(optimizer, d_model=64, warmup_steps=30, factor=2.0)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=32,
        per_device_eval_batch_size=32,
        gradient_accumulation_steps=2,  # exercises num_items_in_batch in the loss
        max_steps=60,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        optimizers=(optimizer, schedule),
    )
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    assert after < before - 1.0
    assert schedule.get_last_lr()[0] == pytest.approx(hf_xcv.training.noam_factor(60, 64, 30, 2.0))


def test_seq2seq_trainer_predicts_with_generate_and_scores_bleu(prepared, tmp_path):
    tokenizer, data = prepared
    model = new_model(tokenizer)

    def compute_metrics(prediction) -> dict[str, float]:
        predictions = np.where(prediction.predictions < 0, tokenizer.pad_token_id, prediction.predictions)
        labels = np.where(prediction.label_ids < 0, tokenizer.pad_token_id, prediction.label_ids)
        hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        references = tokenizer.batch_decode(labels, skip_special_tokens=True)
        return {
            "bleu": Bleu().compute(predictions=hypotheses, references=references)["score"],
            "chrf": ChrF().compute(predictions=hypotheses, references=references)["score"],
        }

    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=32,
        per_device_eval_batch_size=8,
        max_steps=60,
        learning_rate=3e-3,
        predict_with_generate=True,
        generation_num_beams=2,
        generation_max_length=24,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        compute_metrics=compute_metrics,
    )
    before = trainer.predict(data["test"]).metrics
    trainer.train()
    output = trainer.predict(data["test"])
    assert output.predictions.shape[0] == 24  # every test sample, none dropped
    assert output.predictions.shape[1] <= 24
    # 60 steps of a tiny model: far from translating, but generation must reflect the training
    assert output.metrics["test_chrf"] > before["test_chrf"] + 10.0
    trainer.save_model(str(tmp_path / "final"))
    reloaded = hf_xcv.TransformerForConditionalGeneration.from_pretrained(tmp_path / "final")
    assert reloaded.config.vocab_size == len(tokenizer)
