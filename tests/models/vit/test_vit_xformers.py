"""X-former entries inside ViT: [CLS] is global for global-token entries, 2-D entries see the patch grid."""

from __future__ import annotations

import pytest
import torch

from hf_xcv import ViTModel, preset_config


def one_layer_vit(attention_type: str, **kwargs) -> ViTModel:
    config = preset_config(
        "vit-test-tiny", num_hidden_layers=1, image_size=32, attention_type=attention_type, attention_kwargs=kwargs
    )
    torch.manual_seed(0)
    return ViTModel(config).eval().double()


def token_change(model: ViTModel, pixels: torch.Tensor, patch_row: int, patch_col: int) -> torch.Tensor:
    """|Δ| of every output token when one patch of the image changes: (tokens,)."""
    changed = pixels.clone()
    size = model.config.patch_size
    changed[..., patch_row * size : (patch_row + 1) * size, patch_col * size : (patch_col + 1) * size] += 1.0
    with torch.no_grad():
        before = model(pixels).last_hidden_state
        after = model(changed).last_hidden_state
    return (after - before).abs().amax(-1)[0]


@pytest.mark.parametrize(
    "attention_type, kwargs",
    [
        ("longformer", {"attention_window": 2, "dilation": 1, "num_global_tokens": 0}),
        ("bigbird", {"block_size": 4, "num_random_blocks": 0}),
        ("etc", {"local_radius": 2, "num_global_tokens": 0}),
    ],
)
def test_cls_is_a_global_token_and_far_patches_stay_local(attention_type, kwargs):
    model = one_layer_vit(attention_type, **kwargs)
    pixels = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    change = token_change(model, pixels, 4, 4)  # a middle patch of the 8x8 grid (token 37)
    assert change[0] > 1e-8, "[CLS] must see every patch"
    # patch 5 (token 6) sits in BigBird's second block (its first block, holding [CLS], is global)
    assert change[6] == 0.0, "a patch must not see a far one through a local pattern"
    # every patch sees [CLS]: changing only the class token's input changes every token
    with torch.no_grad():
        base = model(pixels).last_hidden_state
        model.embeddings.cls_token.add_(torch.randn_like(model.embeddings.cls_token))
        moved = model(pixels).last_hidden_state
    assert ((moved - base).abs().amax(-1)[0] > 1e-8).all()


@pytest.mark.parametrize("attention_type", ["axial", "local_2d"])
def test_grid_entries_follow_the_patch_grid(attention_type):
    kwargs = {"query_shape": (2, 2), "memory_flange": (0, 0)} if attention_type == "local_2d" else {}
    model = one_layer_vit(attention_type, **kwargs)
    pixels = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    change = token_change(model, pixels, 3, 5)  # patch (3, 5) = token 1 + 3*8 + 5
    touched = {i - 1 for i in (change > 1e-8).nonzero().flatten().tolist() if i > 0}
    if attention_type == "local_2d":
        assert touched == {3 * 8 + 4, 3 * 8 + 5, 2 * 8 + 4, 2 * 8 + 5}  # its 2x2 query block
    else:  # rows then columns: the patch's row reaches every column, so the whole grid changes
        assert len(touched) == 64
    assert change[0] > 1e-8  # [CLS] sees everything


def test_causal_only_entries_are_refused_by_vit():
    with pytest.raises(ValueError, match="cannot serve a ViT encoder"):
        preset_config("vit-test-tiny", attention_type="xl")
