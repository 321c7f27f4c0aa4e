"""The X-former encoders' named configurations: Long Range Arena's, hf_xcv's CPU-scale LRA-style tasks with
their training recipes, and the tests'."""

from __future__ import annotations

from typing import Any

from ...registry import Preset, TrainingRecipe

# Pixel tokens: the grey level is the id, and a black pixel (0) is no padding.
_PIXELS = {"pad_token_id": None}


def _xformer(hidden: int, layers: int, heads: int, mlp: int, **more: Any) -> dict:
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp, **more)


# The training settings of each LRA-style task where a flag of ``hf-xcv-train lra`` leaves them unset. Pathfinder
# follows LRA's own Pathfinder recipe at a CPU scale: no weight decay and large batches (LRA: 512 for 62,400 steps;
# here 128 for 3,000, about 38 epochs of the 10,000 generated images); with batches of 16 or weight decay, every run
# we tried stayed at chance (a constant prediction), as LRA's Pathfinder runs often do
# (google-research/long-range-arena#37, #60).
_LRA_RECIPE = TrainingRecipe(
    "LRA-style task",
    "Tay et al. 2020",
    defaults={"per_device_train_batch_size": 16, "weight_decay": 0.01, "num_train_epochs": 10},
)
_PATHFINDER_RECIPE = TrainingRecipe(
    "LRA Pathfinder",
    "Tay et al. 2020",
    defaults={"per_device_train_batch_size": 128, "weight_decay": 0.0, "max_train_steps": 3000},
)

PRESETS: dict[str, Preset] = {
    # Long Range Arena's shared encoder for its byte-level text task (Tay et al. 2020, Appendix): choose the
    # attention with attention_type=...; LRA reports its accuracy per X-former in Table 1.
    "xformer-lra-text": Preset(
        "xcv_xformer",
        _xformer(256, 4, 4, 1024, vocab_size=257, max_position_embeddings=4096, pooling="mean"),
        "Tay et al. 2020 (Long Range Arena), text classification encoder at 4K bytes",
    ),
    # The Long Range Arena-style tasks of hf_xcv.data.lra at a CPU scale (benchmarks/bench_lra.py): one encoder per
    # task, the same for every attention entry (hf-xcv-train lra sets attention_type and the length).
    "xformer-lra-listops": Preset(
        "xcv_xformer",
        _xformer(64, 2, 4, 128, vocab_size=16, max_position_embeddings=512, hidden_dropout_prob=0.0, pooling="first"),
        "hf_xcv's CPU-scale ListOps encoder (LRA: 512 wide, 6 layers, 2K tokens), pooled at the root operator",
        recipe=_LRA_RECIPE,
    ),
    "xformer-lra-pathfinder": Preset(
        "xcv_xformer",
        _xformer(32, 1, 2, 64, vocab_size=256, max_position_embeddings=1024, hidden_dropout_prob=0.0, **_PIXELS),
        "LRA's Pathfinder encoder size (1 layer, 32 wide, 2 heads; FFN 64, LRA's 32), 32x32 pixels",
        recipe=_PATHFINDER_RECIPE,
    ),
    "xformer-lra-image": Preset(
        "xcv_xformer",
        _xformer(64, 2, 4, 128, vocab_size=256, max_position_embeddings=1024, hidden_dropout_prob=0.0, **_PIXELS),
        "hf_xcv's CPU-scale encoder of digits as 32x32 pixel sequences",
        recipe=_LRA_RECIPE,
    ),
    "xformer-test-tiny": Preset(
        "xcv_xformer",
        _xformer(32, 2, 4, 64, vocab_size=300, max_position_embeddings=64, hidden_dropout_prob=0.0),
        "test fixture",
    ),
}
