"""The XFormer models' test declarations."""

from __future__ import annotations

import torch

from hf_xcv import XFormerForCausalLM, XFormerForSequenceClassification
from model_specs import ModelTestSpec


def xformer_dummy_inputs(
    model, *, batch: int = 2, labels: bool = True, padded: bool = True, length: int = 16
) -> dict:
    """Token ids (the last row padded after 11 tokens when ``padded``) and labels for the model's task (next
    tokens for the LM, classes for the classifier): what the registry-driven tests feed every XFormer model."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    if padded:
        mask[-1, 11:] = 0
    pad = config.pad_token_id if config.pad_token_id is not None else 0  # pixel tokens have no padding id
    inputs = {"input_ids": ids.masked_fill(mask == 0, pad), "attention_mask": mask}
    if labels and isinstance(model, XFormerForCausalLM):
        inputs["labels"] = inputs["input_ids"].masked_fill(mask == 0, -100)
    elif labels and isinstance(model, XFormerForSequenceClassification):
        inputs["labels"] = torch.randint(0, config.num_labels, (batch,), generator=generator)
    return inputs


SPECS = [ModelTestSpec("xcv_xformer", "xformer-test-tiny", xformer_dummy_inputs)]
