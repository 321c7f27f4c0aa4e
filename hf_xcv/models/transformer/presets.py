"""The Transformer's named configurations (base, big, the demo's and the tests'), with the published BLEU."""

from __future__ import annotations

from typing import Any

from ...registry import Preset


def _transformer(d_model: int, layers: int, heads: int, ffn: int, **more: Any) -> dict:
    return dict(
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        **more,
    )


_TRANSFORMER_PAPER = "Vaswani et al. 2017, Tables 2-3"

PRESETS: dict[str, Preset] = {
    "transformer-base": Preset(
        "xcv_transformer",
        _transformer(512, 6, 8, 2048),
        f"{_TRANSFORMER_PAPER}: base model, newstest2014 BLEU 27.3 EN-DE, 38.1 EN-FR",
        "65M",
    ),
    "transformer-big": Preset(
        "xcv_transformer",
        _transformer(1024, 6, 16, 4096, dropout=0.3),
        f"{_TRANSFORMER_PAPER}: big model, newstest2014 BLEU 28.4 EN-DE, 41.8 EN-FR (dropout 0.1 for EN-FR)",
        "213M",
    ),
    # The translation demo: English -> French number words, trains in minutes on 2 CPU cores.
    "transformer-numbers": Preset(
        "xcv_transformer",
        _transformer(128, 3, 4, 512, vocab_size=1000, max_position_embeddings=128),
        "hf_xcv demo on the built-in number corpus (the measured BLEU: docs/models/transformer.md)",
    ),
    "transformer-test-tiny": Preset(
        "xcv_transformer",
        _transformer(32, 2, 4, 64, vocab_size=300, max_position_embeddings=64, dropout=0.0),
        "test fixture",
    ),
}
