"""transformers' Marian checkpoints (model_type ``marian``, the opus-mt family) -> hf_xcv Transformer.

Marian is the paper's post-LN encoder-decoder with half-sin/half-cos positions and a bias on the output
projection (``final_logits_bias``). Every key is renamed or explicitly dropped:

* ``model.shared`` (joint vocabulary) becomes the encoder's token embeddings, which the decoder and the
  output projection tie to; copies of it under ``encoder/decoder.embed_tokens`` and a tied ``lm_head`` are
  dropped after checking that they are copies;
* ``embed_positions`` are dropped after checking that they are the sinusoids hf_xcv recomputes;
* ``encoder_attn`` -> ``cross_attn``, ``out_proj`` -> ``o_proj``, ``fc1/fc2`` -> ``mlp.fc1/fc2``,
  ``final_logits_bias`` (1, V) -> ``lm_head.bias`` (V,).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, MarianConfig

from ..layers import sinusoidal_table
from .rules import Rule, rename_keys

logger = logging.getLogger(__name__)

SOURCE_MODEL_TYPE = "marian"
TARGET_MODEL_TYPE = "xcv_transformer"
PROCESSOR_TYPE = None
TOKENIZER_CLASS = "MarianTokenizer"
# Marian's tokenizer (sentencepiece models + vocabularies) and generation settings travel unchanged, so
# AutoTokenizer and generate() behave as with the source repo.
COPIED_FILES = (
    "source.spm",
    "target.spm",
    "vocab.json",
    "target_vocab.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "generation_config.json",
)

_P = r"^(model\.)?"  # MarianMTModel keys carry the base model's prefix; MarianModel keys do not
_WB = r"(weight|bias)"
_STACK = _P + r"(encoder|decoder)\.layers\.(\d+)\."

RULES: list[Rule] = [
    (_STACK + r"self_attn\.(q|k|v)_proj\." + _WB, r"\1\2.layers.\3.self_attn.\4_proj.\5"),
    (_STACK + r"encoder_attn\.(q|k|v)_proj\." + _WB, r"\1\2.layers.\3.cross_attn.\4_proj.\5"),
    (_STACK + r"self_attn\.out_proj\." + _WB, r"\1\2.layers.\3.self_attn.o_proj.\4"),
    (_STACK + r"encoder_attn\.out_proj\." + _WB, r"\1\2.layers.\3.cross_attn.o_proj.\4"),
    (_STACK + r"encoder_attn_layer_norm\." + _WB, r"\1\2.layers.\3.cross_attn_layer_norm.\4"),
    (_STACK + r"(self_attn_layer_norm|final_layer_norm)\." + _WB, r"\1\2.layers.\3.\4.\5"),
    (_STACK + r"(fc1|fc2)\." + _WB, r"\1\2.layers.\3.mlp.\4.\5"),
    (_P + r"(encoder|decoder)\.embed_tokens\.weight", r"\1\2.embed_tokens.weight"),
    (r"lm_head\.weight", r"lm_head.weight"),
    (r"final_logits_bias", r"lm_head.bias"),
]

# Fields read from the source config; a field it lacks takes MarianConfig's default (see _source_defaults).
_SOURCE_FIELDS = (
    "vocab_size",
    "max_position_embeddings",
    "encoder_layers",
    "encoder_ffn_dim",
    "encoder_attention_heads",
    "decoder_layers",
    "decoder_ffn_dim",
    "decoder_attention_heads",
    "activation_function",
    "d_model",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "init_std",
    "decoder_start_token_id",
    "scale_embedding",
    "pad_token_id",
    "eos_token_id",
    "bos_token_id",
    "share_encoder_decoder_embeddings",
    "tie_word_embeddings",
    "use_cache",
)
_PASSED_THROUGH = ("forced_eos_token_id", "dtype", "torch_dtype")
_ARCHITECTURES = {
    "MarianMTModel": "TransformerForConditionalGeneration",
    "MarianModel": "TransformerModel",
}


def convert_config(source: dict[str, Any]) -> dict[str, Any]:
    """transformers Marian config dict -> hf_xcv TransformerConfig dict."""
    if source.get("model_type") != SOURCE_MODEL_TYPE:
        raise ValueError(f"expected a config of model_type {SOURCE_MODEL_TYPE!r}, got {source.get('model_type')!r}")
    defaults = MarianConfig().to_dict()
    out: dict[str, Any] = {key: source.get(key, defaults[key]) for key in _SOURCE_FIELDS}
    # Marian ignores decoder_vocab_size when the embeddings are shared; a stale value must not break loading
    shared = out["share_encoder_decoder_embeddings"]
    out["decoder_vocab_size"] = out["vocab_size"] if shared else source.get("decoder_vocab_size") or out["vocab_size"]
    out.update({key: source[key] for key in _PASSED_THROUGH if key in source})
    if source.get("encoder_layerdrop") or source.get("decoder_layerdrop"):
        logger.warning(
            "hf_xcv's Transformer has no LayerDrop; encoder/decoder_layerdrop are dropped (inference is unaffected)"
        )
    out.update(
        model_type=TARGET_MODEL_TYPE,
        position_embedding_type="sinusoidal",
        sinusoidal_layout="half",
        normalize_before=False,
        layer_norm_eps=1e-5,  # nn.LayerNorm's default, which Marian uses
        lm_head_bias=True,
        label_smoothing=0.0,  # MarianMTModel's loss is plain cross-entropy; keep it for equal losses
    )
    architectures = [_ARCHITECTURES[a] for a in source.get("architectures") or [] if a in _ARCHITECTURES]
    if architectures:
        out["architectures"] = architectures
    return out


def _prefix(state_dict: dict[str, torch.Tensor]) -> str:
    """``model.`` for MarianMTModel checkpoints, nothing for MarianModel ones."""
    return "model." if any(key.startswith("model.") for key in state_dict) else ""


def _check_copy(state_dict: dict[str, torch.Tensor], key: str, reference: torch.Tensor, what: str) -> None:
    if key in state_dict and not torch.equal(state_dict[key], reference):
        raise ValueError(f"checkpoint key {key} differs from {what}, although the config says they are tied")


def _check_positions(state_dict: dict[str, torch.Tensor], key: str) -> None:
    table = state_dict[key]
    expected = sinusoidal_table(table.shape[0], table.shape[1], "half").to(table.dtype)
    if not torch.allclose(table.float(), expected.float(), atol=1e-4):
        raise ValueError(f"{key} is not Marian's fixed sinusoidal table; hf_xcv cannot take learned positions here")


def convert_state_dict(
    state_dict: dict[str, torch.Tensor], config: dict[str, Any]
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Marian state dict -> hf_xcv Transformer state dict, and the keys deliberately dropped.

    ``config`` is the *source* Marian config dict (it says which embeddings are shared or tied).
    """
    prefix = _prefix(state_dict)
    state_dict = dict(state_dict)
    dropped: list[str] = []
    for key in [k for k in state_dict if k.endswith("embed_positions.weight")]:
        _check_positions(state_dict, key)
        dropped.append(key)
        del state_dict[key]
    share = config.get("share_encoder_decoder_embeddings", True)
    if share:
        shared_key = f"{prefix}shared.weight"
        encoder_key = f"{prefix}encoder.embed_tokens.weight"
        shared = state_dict.pop(shared_key, None)
        if shared is None:
            shared = state_dict.get(encoder_key)
            if shared is None:
                raise ValueError(f"the checkpoint has neither {shared_key} nor {encoder_key}: no token embeddings")
        else:  # moved, not dropped
            _check_copy(state_dict, encoder_key, shared, shared_key)
            state_dict[encoder_key] = shared
        decoder_key = f"{prefix}decoder.embed_tokens.weight"
        if decoder_key in state_dict:
            _check_copy(state_dict, decoder_key, shared, "the shared embeddings")
            dropped.append(decoder_key)
            del state_dict[decoder_key]
    elif f"{prefix}shared.weight" in state_dict:  # separate embeddings: Marian's `shared` is an unused extra
        dropped.append(f"{prefix}shared.weight")
        del state_dict[f"{prefix}shared.weight"]
    if config.get("tie_word_embeddings", True) and "lm_head.weight" in state_dict:
        source = f"{prefix}{'encoder' if share else 'decoder'}.embed_tokens.weight"
        if source in state_dict:
            _check_copy(state_dict, "lm_head.weight", state_dict[source], source)
        dropped.append("lm_head.weight")
        del state_dict["lm_head.weight"]
    if "final_logits_bias" in state_dict:
        state_dict["final_logits_bias"] = state_dict["final_logits_bias"].reshape(-1)  # (1, V) -> (V,)
    renamed, more_dropped = rename_keys(state_dict, RULES)
    return renamed, dropped + more_dropped


def _effective_config(config: dict[str, Any], state_dict: dict[str, torch.Tensor]) -> dict[str, Any]:
    """transformers 5 unties every embedding when ``tie_word_embeddings=False``, even with
    ``share_encoder_decoder_embeddings=True``: such a checkpoint has different encoder and decoder embeddings
    and converts as one with separate vocabularies."""
    if not config.get("share_encoder_decoder_embeddings", True) or config.get("tie_word_embeddings", True):
        return config
    prefix = _prefix(state_dict)
    encoder = state_dict.get(f"{prefix}encoder.embed_tokens.weight")
    decoder = state_dict.get(f"{prefix}decoder.embed_tokens.weight")
    if encoder is None or decoder is None or torch.equal(encoder, decoder):
        return config
    return {**config, "share_encoder_decoder_embeddings": False}


def convert(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor], for_task_model: bool | None = None
) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[str]]:
    """Config and weights together. A MarianMTModel checkpoint fed to a bare ``TransformerModel`` keeps its
    output projection as a head the model ignores (it is a task-head weight)."""
    config = _effective_config(config, state_dict)
    new_state_dict, dropped = convert_state_dict(state_dict, config)
    return convert_config(config), new_state_dict, dropped


def finish_folder(folder: Path, source: dict[str, Any]) -> None:
    """What older Marian folders leave implicit, written out for the converted folder.

    * ``tokenizer_class``: Marian's conversion script wrote tokenizer configs without one; AutoTokenizer then
      went by the model type, which is now ``xcv_transformer``.
    * ``generation_config.json``: folders saved before transformers had one keep ``num_beams``, ``max_length``,
      ``bad_words_ids`` (which bans ``<pad>``) in config.json; hf_xcv's config does not carry them.
    """
    if (folder / "source.spm").exists():
        config_file = folder / "tokenizer_config.json"
        tokenizer_config = json.loads(config_file.read_text()) if config_file.exists() else {}
        tokenizer_config.setdefault("tokenizer_class", TOKENIZER_CLASS)
        config_file.write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True))
    if not (folder / "generation_config.json").exists():
        known = GenerationConfig().to_dict().keys() | {"pad_token_id", "eos_token_id", "decoder_start_token_id"}
        settings = {key: value for key, value in source.items() if key in known and value is not None}
        GenerationConfig.from_model_config(settings).to_json_file(folder / "generation_config.json")


# ----------------------------------------------------------------------------------------------------------
# back to transformers' format: a Marian-compatible hf_xcv Transformer -> MarianMTModel / MarianModel
# ----------------------------------------------------------------------------------------------------------

EXPORT_RULES: list[Rule] = [
    (_STACK + r"self_attn\.o_proj\." + _WB, r"\1\2.layers.\3.self_attn.out_proj.\4"),
    (_STACK + r"cross_attn\.(q|k|v)_proj\." + _WB, r"\1\2.layers.\3.encoder_attn.\4_proj.\5"),
    (_STACK + r"cross_attn\.o_proj\." + _WB, r"\1\2.layers.\3.encoder_attn.out_proj.\4"),
    (_STACK + r"cross_attn_layer_norm\." + _WB, r"\1\2.layers.\3.encoder_attn_layer_norm.\4"),
    (_STACK + r"mlp\.(fc1|fc2)\." + _WB, r"\1\2.layers.\3.\4.\5"),
    (_STACK + r"(self_attn\.(q|k|v)_proj|self_attn_layer_norm|final_layer_norm)\." + _WB, r"\1\2.layers.\3.\4.\6"),
    (_P + r"(encoder|decoder)\.embed_tokens\.weight", r"\1\2.embed_tokens.weight"),
    (r"lm_head\.(weight|bias)", r"lm_head.\1"),
]
# Settings of an hf_xcv Transformer that Marian fixes: (field, value Marian has, what it means).
_MARIAN_FIXED = (
    ("attention_type", "full", "full attention"),
    ("position_embedding_type", "sinusoidal", "fixed sinusoidal positions"),
    ("sinusoidal_layout", "half", "sin in the first half of the features, cos in the second"),
    ("normalize_before", False, "post-LN blocks"),
)
EXPORTED_TOKENIZER_CLASS = "PreTrainedTokenizerFast"  # what loads hf_xcv's tokenizer.json without hf_xcv


def export_config(config: dict[str, Any]) -> dict[str, Any]:
    """hf_xcv TransformerConfig dict -> transformers MarianConfig dict; a ValueError naming every setting that
    Marian fixes otherwise."""
    problems = [
        f"{field}={config.get(field)!r} (Marian has {value!r}: {meaning})"
        for field, value, meaning in _MARIAN_FIXED
        if config.get(field, value) != value
    ]
    if abs(config.get("layer_norm_eps", 1e-5) - 1e-5) > 1e-12:
        problems.append(f"layer_norm_eps={config['layer_norm_eps']} (Marian's LayerNorms use 1e-5)")
    if problems:
        raise ValueError("this Transformer cannot be written as a Marian model: " + "; ".join(problems))
    out = {key: config[key] for key in _SOURCE_FIELDS if key in config}
    out.update({key: config[key] for key in _PASSED_THROUGH if key in config})
    out["decoder_vocab_size"] = config.get("decoder_vocab_size", config["vocab_size"])
    out["model_type"] = SOURCE_MODEL_TYPE
    reverse = {ours: theirs for theirs, ours in _ARCHITECTURES.items()}
    out["architectures"] = [reverse.get(a, "MarianMTModel") for a in config.get("architectures") or ["MarianMTModel"]]
    return out


def export(
    config: dict[str, Any], state_dict: dict[str, torch.Tensor]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Config and weights in transformers' Marian layout: the shared embeddings under ``model.shared`` as well,
    the sinusoidal tables written out, the output bias as ``final_logits_bias`` (zeros without one)."""
    target = export_config(config)
    renamed, _ = rename_keys(state_dict, EXPORT_RULES)
    prefix = _prefix(renamed)
    encoder = renamed[f"{prefix}encoder.embed_tokens.weight"]
    if target.get("share_encoder_decoder_embeddings", True):
        renamed[f"{prefix}shared.weight"] = encoder
        renamed[f"{prefix}decoder.embed_tokens.weight"] = encoder
    table = sinusoidal_table(target["max_position_embeddings"], target["d_model"], "half").to(encoder.dtype)
    for stack in ("encoder", "decoder"):
        renamed[f"{prefix}{stack}.embed_positions.weight"] = table
    if "lm_head.weight" not in renamed and prefix:  # tied: the embeddings it is tied to
        stack = "encoder" if target.get("share_encoder_decoder_embeddings", True) else "decoder"
        renamed["lm_head.weight"] = renamed[f"{prefix}{stack}.embed_tokens.weight"]
    bias = renamed.pop("lm_head.bias", None)
    if prefix:
        vocab = target["decoder_vocab_size"]
        renamed["final_logits_bias"] = (torch.zeros(vocab, dtype=encoder.dtype) if bias is None else bias)[None]
    return target, renamed
