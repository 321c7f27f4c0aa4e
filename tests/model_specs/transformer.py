"""The Transformer's test declarations."""

from __future__ import annotations

import torch

from hf_xcv import TransformerForConditionalGeneration
from model_specs import ModelTestSpec


def transformer_dummy_inputs(
    model, *, batch: int = 2, labels: bool = True, padded: bool = True
) -> dict:
    """Source ids (the last row padded after 5 tokens when ``padded``), a target prefix behind the start token,
    and target labels for the generation model: what the registry-driven tests feed every Transformer."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    source = torch.randint(4, config.vocab_size, (batch, 7), generator=generator)
    mask = torch.ones_like(source)
    if padded:
        mask[-1, 5:] = 0
    target = torch.randint(4, config.decoder_vocab_size, (batch, 5), generator=generator)
    start = torch.full((batch, 1), config.decoder_start_token_id)
    inputs = {
        "input_ids": source.masked_fill(mask == 0, config.pad_token_id),
        "attention_mask": mask,
        "decoder_input_ids": torch.cat([start, target[:, :-1]], dim=1),
    }
    if labels and isinstance(model, TransformerForConditionalGeneration):
        inputs["labels"] = target
    return inputs


SPECS = [ModelTestSpec("xcv_transformer", "transformer-test-tiny", transformer_dummy_inputs)]
