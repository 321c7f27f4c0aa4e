"""What the DETR and Deformable DETR tests share: normalisation statistics worth comparing, a padded batch,
the original checkpoints' layouts."""

from __future__ import annotations

import re

import torch


def randomize_norms(model: torch.nn.Module) -> None:
    """Non-trivial BatchNorm statistics and LayerNorms, so that parity means something."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, tensor in [*model.named_buffers(), *model.named_parameters()]:
            if name.endswith("running_var") or (
                name.endswith("weight") and ("normalization" in name or "norm" in name)
            ):
                tensor.copy_(torch.rand(tensor.shape, generator=generator) + 0.5)
            elif name.endswith("running_mean") or (
                name.endswith("bias") and ("normalization" in name or "norm" in name)
            ):
                tensor.copy_(0.1 * torch.randn(tensor.shape, generator=generator))


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two images of different sizes (128x96 and 64x64) padded with zeros to 128x96, and their pixel mask."""
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(2, 3, 128, 96, generator=generator)
    mask = torch.ones(2, 128, 96, dtype=torch.long)
    mask[1, 64:] = 0
    mask[1, :, 64:] = 0
    return pixels * mask[:, None], mask


def assert_same_detections(a, b, atol: float = 1e-4) -> None:
    torch.testing.assert_close(a.logits, b.logits, atol=atol, rtol=0)
    torch.testing.assert_close(a.pred_boxes, b.pred_boxes, atol=atol, rtol=0)


def torchvision_names(state_dict: dict[str, torch.Tensor], prefix: str, new_prefix: str) -> dict[str, torch.Tensor]:
    """transformers' ResNet keys under ``prefix`` renamed to torchvision's (the inverse of the converter's map)."""
    inverse = {}
    for key, tensor in state_dict.items():
        if not key.startswith(prefix):
            inverse[key] = tensor
            continue
        inner = key[len(prefix) :]
        inner = inner.replace("embedder.embedder.convolution", "conv1").replace(
            "embedder.embedder.normalization", "bn1"
        )
        inner = re.sub(
            r"encoder\.stages\.(\d+)\.layers\.(\d+)\.",
            lambda m: f"layer{int(m.group(1)) + 1}.{m.group(2)}.",
            inner,
        )
        inner = re.sub(r"layer\.(\d)\.convolution", lambda m: f"conv{int(m.group(1)) + 1}", inner)
        inner = re.sub(r"layer\.(\d)\.normalization", lambda m: f"bn{int(m.group(1)) + 1}", inner)
        inner = inner.replace("shortcut.convolution", "downsample.0").replace("shortcut.normalization", "downsample.1")
        inverse[new_prefix + inner] = tensor
    return inverse


def original_layout(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A facebookresearch/detr state dict of the same weights: fused in_proj, numbered norms, torchvision names."""
    out = torchvision_names(model.state_dict(), "model.backbone.model.", "backbone.0.body.")
    renamed: dict[str, torch.Tensor] = {}
    norms = {
        "encoder": {"self_attn_layer_norm": "norm1", "final_layer_norm": "norm2"},
        "decoder": {"self_attn_layer_norm": "norm1", "encoder_attn_layer_norm": "norm2", "final_layer_norm": "norm3"},
    }
    for key, tensor in out.items():
        key = key.replace("model.input_projection", "input_proj").replace(
            "model.query_position_embeddings", "query_embed"
        )
        key = key.replace("model.decoder.layernorm", "transformer.decoder.norm")
        key = key.replace("class_labels_classifier", "class_embed").replace("bbox_predictor", "bbox_embed")
        if match := re.fullmatch(r"model\.(encoder|decoder)\.layers\.(\d+)\.(.*)", key):
            stack, index, rest = match.groups()
            rest = rest.replace("encoder_attn.", "multihead_attn.").replace("o_proj", "out_proj")
            rest = rest.replace("mlp.fc1", "linear1").replace("mlp.fc2", "linear2")
            for name, number in norms[stack].items():
                rest = rest.replace(name, number)
            key = f"transformer.{stack}.layers.{index}.{rest}"
        renamed[key] = tensor
    fused: dict[str, torch.Tensor] = {}
    for key, tensor in renamed.items():
        if match := re.fullmatch(r"(.*)\.(q|k|v)_proj\.(weight|bias)", key):
            if match.group(2) == "q":
                parts = [renamed[f"{match.group(1)}.{p}_proj.{match.group(3)}"] for p in "qkv"]
                fused[f"{match.group(1)}.in_proj_{match.group(3)}"] = torch.cat(parts)
            continue
        fused[key] = tensor
    return fused
