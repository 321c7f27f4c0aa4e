"""Regex rename rules for state-dict conversion: the whole checkpoint must be accounted for."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import torch

Rule = tuple[str, str]  # (source regex, replacement with \1 groups)


def rename_keys(
    state_dict: dict[str, torch.Tensor],
    rules: Sequence[Rule],
    drop: Iterable[str] = (),
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Apply the first matching rule to every key.

    Keys matching a ``drop`` regex are removed and returned; a key matching neither a rule nor a
    drop pattern raises ValueError listing every such key, so nothing is silently lost.
    """
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]
    drop_patterns = [re.compile(pattern) for pattern in drop]
    out: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    unknown: list[str] = []
    for key, tensor in state_dict.items():
        if any(p.fullmatch(key) for p in drop_patterns):
            dropped.append(key)
            continue
        for pattern, replacement in compiled:
            if pattern.fullmatch(key):
                new_key = pattern.sub(replacement, key)
                if new_key in out:
                    raise ValueError(f"two checkpoint keys map to {new_key!r}")
                out[new_key] = tensor
                break
        else:
            unknown.append(key)
    if unknown:
        shown = ", ".join(sorted(unknown)[:10])
        raise ValueError(f"{len(unknown)} checkpoint keys have no conversion rule (first: {shown})")
    return out, dropped


def check_exact_keys(expected: Iterable[str], state_dict: dict[str, torch.Tensor], source: str, model: str) -> None:
    """ValueError unless the converted ``state_dict`` holds exactly the ``expected`` keys (a model's, built on the
    meta device): nothing missing, nothing the model would not use; ``model`` names it in the message ("an IPT for
    ['sr_x2']")."""
    expected = set(expected)
    missing, extra = sorted(expected - set(state_dict)), sorted(set(state_dict) - expected)
    for what, keys in (("lacks", missing), ("has unexpected", extra)):
        if keys:
            raise ValueError(
                f"{source} {what} {len(keys)} weights of {model} after conversion (hf_xcv's names): "
                f"{keys[:8]}{' ...' if len(keys) > 8 else ''}"
            )


# ---------------------------------------------------------------------------------------------------------------
# reading an original checkpoint's layout


def required_shape(state_dict: dict[str, torch.Tensor], key: str, checkpoint: str) -> tuple[int, ...]:
    """The shape of ``state_dict[key]``; a ValueError saying that ``checkpoint`` (in words: "an official TTSR
    checkpoint") has that key and this state dict does not."""
    if key not in state_dict:
        raise ValueError(f"{checkpoint} has {key!r}; this one does not (another model?)")
    return tuple(state_dict[key].shape)


def indices_of(state_dict: dict[str, torch.Tensor], prefix: str) -> list[int]:
    """The sorted k of the ``prefix{k}.`` entries (``prefix`` taken literally)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    return sorted({int(match.group(1)) for key in state_dict if (match := pattern.match(key))})


def numbered(state_dict: dict[str, torch.Tensor], prefix: str, what: str) -> int:
    """How many ``prefix{k}.`` entries there are, k = 0 .. N-1; a ValueError naming ``what`` they are when the
    numbering has gaps."""
    found = indices_of(state_dict, prefix)
    if found != list(range(len(found))):
        raise ValueError(f"the {what} {prefix}N are numbered {found}, not 0 .. {len(found) - 1}")
    return len(found)


def count_indices(state_dict: dict[str, torch.Tensor], pattern: str) -> int:
    """One more than the largest index that ``pattern`` (a regex with the index as group 1) finds in the keys; 0
    when it finds none."""
    found = {int(m.group(1)) for k in state_dict if (m := re.match(pattern, k))}
    return max(found) + 1 if found else 0


def precision_rtol(tensor: torch.Tensor) -> float:
    """The relative rounding of a tensor's precision (a half-precision checkpoint holds constants to ~1e-3): what a
    comparison of its values with constants allows."""
    return max(1e-6, 4 * torch.finfo(tensor.dtype).eps) if tensor.is_floating_point() else 1e-6


# ---------------------------------------------------------------------------------------------------------------
# PyTorch's nn.Transformer / nn.MultiheadAttention layout


def split_in_proj(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``nn.MultiheadAttention``'s fused ``in_proj_weight`` (3d, d) / ``in_proj_bias`` (3d,) split into
    ``q_proj`` / ``k_proj`` / ``v_proj`` thirds, and ``nn.TransformerDecoderLayer``'s cross-attention
    ``multihead_attn`` named ``encoder_attn`` (transformers' and hf_xcv's name); other keys unchanged."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        key = key.replace(".multihead_attn.", ".encoder_attn.")
        if match := re.fullmatch(r"(.*)\.in_proj_(weight|bias)", key):
            if tensor.shape[0] % 3:
                raise ValueError(f"{key} has {tensor.shape[0]} rows, not three equal parts (query, key, value)")
            for name, part in zip(("q", "k", "v"), tensor.chunk(3, dim=0)):
                out[f"{match.group(1)}.{name}_proj.{match.group(2)}"] = part.clone()
        else:
            out[key] = tensor
    return out


def name_numbered_norms(
    state_dict: dict[str, torch.Tensor],
    norms: dict[tuple[str, str], str],
    pattern: str = r"(transformer\.(encoder|decoder)\.layers\.\d+\.)norm(\d)\.(weight|bias)",
) -> dict[str, torch.Tensor]:
    """An original layer's numbered LayerNorms (``norm1``, ``norm2``, ...) named by ``norms`` ((stack, number) ->
    name, e.g. ``("decoder", "2") -> "encoder_attn_layer_norm"``); ``pattern`` matches their keys with the layer
    prefix, the stack, the number and weight/bias as groups. A number the table lacks is a ValueError."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        if match := re.fullmatch(pattern, key):
            norm = norms.get((match.group(2), match.group(3)))
            if norm is None:
                raise ValueError(f"{key}: the original {match.group(2)} layers have no norm{match.group(3)}")
            key = f"{match.group(1)}{norm}.{match.group(4)}"
        out[key] = tensor
    return out
