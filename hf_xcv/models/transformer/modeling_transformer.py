"""The vanilla Transformer (Vaswani et al. 2017): an encoder-decoder for sequence-to-sequence tasks.

Reads top to bottom: masks and embeddings -> EncoderLayer -> DecoderLayer -> Encoder -> Decoder -> Model ->
ForConditionalGeneration. Blocks are post-LN as in the paper (``normalize_before`` switches to pre-LN);
attention layers are hf_xcv's shared ``MultiHeadAttention`` with a core from the registry, and decoding
runs on transformers' generation machinery with its ``EncoderDecoderCache``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.utils.generic import can_return_tuple

from ...attention import MultiHeadAttention
from ...layers import Mlp, ScaledEmbedding, SinusoidalPositionEmbedding, check_range, is_tracing
from ...losses import label_smoothed_loss
from ...modeling_utils import XcvGenerationMixin, XcvPreTrainedModel, init_sequence_model_weights
from ...utils.checks import check_batch_not_empty
from .configuration_transformer import TRANSFORMER_ATTENTION_REQUESTS, TransformerConfig


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: ``labels`` (B, T) shifted one step right behind the start token.

    Ignored label positions (-100) become padding.
    """
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def padding_keep_mask(attention_mask: torch.Tensor | None, length: int, name: str) -> torch.Tensor | None:
    """(B, L) 1/0 padding mask -> (B, 1, 1, L) boolean keep mask for the attention cores."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2 or attention_mask.shape[1] != length:
        raise ValueError(
            f"{name} must be (batch, {length}) with 1 for tokens and 0 for padding, got {tuple(attention_mask.shape)}"
        )
    return attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L)


def check_not_empty(keep: torch.Tensor | None, name: str) -> None:
    """A sequence whose (B, 1, 1, L) keep mask is all False has nothing to encode or attend to (checked in eager
    calls: a compiled or exported graph cannot branch on the mask's values)."""
    if keep is not None and not is_tracing():
        has_tokens = keep.flatten(1).any(dim=-1)  # (B,)
        if not has_tokens.all():
            empty = (~has_tokens).nonzero().flatten().tolist()
            raise ValueError(f"{name} marks no token at all in batch rows {empty}: empty sequences cannot be encoded")


class TransformerStack(nn.Module):
    """What encoder and decoder share: token embeddings scaled by sqrt(d_model), positions, dropout, blocks.

    ``role`` ("source" or "target") names the sequence in error messages.
    """

    def __init__(self, config: TransformerConfig, vocab_size: int, layers: list[nn.Module], role: str):
        super().__init__()
        self.role = role
        self.max_positions = config.max_position_embeddings
        scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = ScaledEmbedding(vocab_size, config.d_model, config.pad_token_id, embed_scale=scale)
        if config.position_embedding_type == "learned":
            self.embed_positions = nn.Embedding(config.max_position_embeddings, config.d_model)
        else:
            self.embed_positions = SinusoidalPositionEmbedding(
                config.max_position_embeddings, config.d_model, config.sinusoidal_layout
            )
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(layers)
        # Pre-LN stacks end with a LayerNorm; post-LN blocks already normalise their output.
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None

    def embed(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, past_length: int = 0
    ) -> torch.Tensor:
        """(B, L) token ids, or (B, L, d_model) embeddings as ``embed_tokens`` makes them (scaled) -> (B, L,
        d_model) block input."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        given = "input_ids" if input_ids is not None else "inputs_embeds"
        prefix = "decoder_" if self.role == "target" else ""
        check_batch_not_empty(prefix + given, input_ids if input_ids is not None else inputs_embeds)
        if input_ids is not None:
            if input_ids.dim() != 2:
                raise ValueError(f"input_ids must be (batch, length), got shape {tuple(input_ids.shape)}")
            # Checked on the first call only: later decoding steps feed back the model's own tokens.
            if past_length == 0:
                vocab = self.embed_tokens.num_embeddings  # resize_token_embeddings changes it
                check_range(input_ids, 0, vocab, "token ids", "the vocabulary; ids outside it have no embedding")
            inputs_embeds = self.embed_tokens(input_ids)
        length = inputs_embeds.shape[1]
        if length == 0:
            raise ValueError("empty input: a sequence needs at least one token (the tokenizer adds </s>)")
        if past_length + length > self.max_positions:
            raise ValueError(self._overflow(past_length, length))
        positions = torch.arange(past_length, past_length + length, device=inputs_embeds.device)
        return self.dropout(inputs_embeds + self.embed_positions(positions).to(inputs_embeds.dtype))

    def _overflow(self, past_length: int, length: int) -> str:
        limit = self.max_positions
        if self.role == "source":
            return (
                f"the source sequence of {length} tokens is longer than max_position_embeddings={limit}; truncate it "
                f"(tokenizer(..., truncation=True, max_length={limit}))"
            )
        return (
            f"the target sequence of {past_length + length} tokens ({past_length} generated or cached before this "
            f"step) is longer than max_position_embeddings={limit}: the decoder has no position for it; generate() "
            f"stops at max_length={limit}, and labels must be truncated to {limit} tokens"
        )

    def finish(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return hidden_states if self.layer_norm is None else self.layer_norm(hidden_states)


def _attention(config: TransformerConfig, num_heads: int, layer_idx: int) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model,
        num_heads,
        attention_type=config.attention_type,
        attention_kwargs=config.attention_kwargs,
        dropout=config.attention_dropout,
        config=config,
        layer_idx=layer_idx,
    )


class TransformerBlock(GradientCheckpointingLayer):
    """Residual sub-layers: post-LN ``LN(x + drop(f(x)))`` (the paper) or pre-LN ``x + drop(f(LN(x)))``."""

    def __init__(self, config: TransformerConfig, ffn_dim: int):
        super().__init__()
        self.normalize_before = config.normalize_before
        self.dropout = nn.Dropout(config.dropout)
        self.mlp = Mlp(
            config.d_model, ffn_dim, act=config.activation_function, dropout=config.activation_dropout, out_dropout=0.0
        )
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def residual(self, x: torch.Tensor, norm: nn.LayerNorm, sublayer: Callable[[torch.Tensor], torch.Tensor]):
        out = sublayer(norm(x) if self.normalize_before else x)
        if self.training:  # skipping the module call at inference saves per-step overhead when decoding
            out = self.dropout(out)
        return x + out if self.normalize_before else norm(x + out)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.residual(x, self.final_layer_norm, self.mlp)


class TransformerEncoderLayer(TransformerBlock):
    """Self-attention over the source, then the feed-forward block."""

    def __init__(self, config: TransformerConfig, layer_idx: int):
        super().__init__(config, config.encoder_ffn_dim)
        self.self_attn = _attention(config, config.encoder_attention_heads, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self, hidden_states: torch.Tensor, *, keep: torch.Tensor | None = None, output_attentions: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        weights = []

        def attend(x: torch.Tensor) -> torch.Tensor:
            out, w, _ = self.self_attn(x, attention_mask=keep, output_attentions=output_attentions)
            weights.append(w)
            return out

        hidden_states = self.residual(hidden_states, self.self_attn_layer_norm, attend)
        return self.feed_forward(hidden_states), weights[0]


class TransformerDecoderLayer(TransformerBlock):
    """Masked self-attention, attention over the encoder output, then the feed-forward block."""

    def __init__(self, config: TransformerConfig, layer_idx: int):
        super().__init__(config, config.decoder_ffn_dim)
        self.self_attn = _attention(config, config.decoder_attention_heads, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.cross_attn = _attention(config, config.decoder_attention_heads, layer_idx)
        self.cross_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        *,
        self_keep: torch.Tensor | None = None,
        cross_keep: torch.Tensor | None = None,
        cache: Cache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        weights = []

        def attend_self(x: torch.Tensor) -> torch.Tensor:
            out, w, _ = self.self_attn(
                x, attention_mask=self_keep, causal=True, cache=cache, output_attentions=output_attentions
            )
            weights.append(w)
            return out

        def attend_source(x: torch.Tensor) -> torch.Tensor:
            out, w, _ = self.cross_attn(
                x, encoder_hidden_states, attention_mask=cross_keep, cache=cache, output_attentions=output_attentions
            )
            weights.append(w)
            return out

        hidden_states = self.residual(hidden_states, self.self_attn_layer_norm, attend_self)
        hidden_states = self.residual(hidden_states, self.cross_attn_layer_norm, attend_source)
        return self.feed_forward(hidden_states), weights[0], weights[1]


class TransformerEncoder(TransformerStack):
    """Source tokens -> contextual representations (B, S, d_model)."""

    def __init__(self, config: TransformerConfig):
        layers = [TransformerEncoderLayer(config, i) for i in range(config.encoder_layers)]
        super().__init__(config, config.vocab_size, layers, role="source")

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        *,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_dict: bool = True,
    ) -> BaseModelOutput:
        """Called by the model and by ``generate`` (``get_encoder()(input_ids, attention_mask=...,
        return_dict=True)``); tuples are never returned."""
        hidden_states = self.embed(input_ids, inputs_embeds)  # (B, S, d_model)
        keep = padding_keep_mask(attention_mask, hidden_states.shape[1], "attention_mask")
        check_not_empty(keep, "attention_mask")
        all_hidden, all_attentions = [], []
        for layer in self.layers:
            all_hidden.append(hidden_states)
            hidden_states, weights = layer(hidden_states, keep=keep, output_attentions=output_attentions)
            all_attentions.append(weights)
        hidden_states = self.finish(hidden_states)
        return BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=(*all_hidden, hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
        )


class TransformerDecoder(TransformerStack):
    """Target prefix + encoder output -> next-token representations (B, T, d_model), with a key/value cache."""

    def __init__(self, config: TransformerConfig):
        layers = [TransformerDecoderLayer(config, i) for i in range(config.decoder_layers)]
        super().__init__(config, config.decoder_vocab_size, layers, role="target")

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool = False,
        *,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if encoder_hidden_states is None:
            raise ValueError("the decoder needs encoder_hidden_states (the encoder output)")
        if self.training and any(layer.gradient_checkpointing for layer in self.layers):
            use_cache = False  # recomputed blocks would append to the cache twice
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        elif cache is not None and not isinstance(cache, EncoderDecoderCache):
            cache = EncoderDecoderCache(cache, DynamicCache())  # a plain cache holds the self-attention side
        cache = cache if use_cache else None
        past = cache.get_seq_length() if cache is not None else 0
        hidden_states = self.embed(input_ids, inputs_embeds, past)  # (B, T, d_model)
        self_keep = padding_keep_mask(attention_mask, past + hidden_states.shape[1], "decoder_attention_mask")
        cross_keep = padding_keep_mask(encoder_attention_mask, encoder_hidden_states.shape[1], "attention_mask")
        all_hidden, self_weights, cross_weights = [], [], []
        for layer in self.layers:
            all_hidden.append(hidden_states)
            hidden_states, w_self, w_cross = layer(
                hidden_states,
                encoder_hidden_states,
                self_keep=self_keep,
                cross_keep=cross_keep,
                cache=cache,
                output_attentions=output_attentions,
            )
            self_weights.append(w_self)
            cross_weights.append(w_cross)
        hidden_states = self.finish(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            cache=cache,
            hidden_states=(*all_hidden, hidden_states) if output_hidden_states else None,
            attentions=tuple(self_weights) if output_attentions else None,
            cross_attentions=tuple(cross_weights) if output_attentions else None,
        )


class TransformerPreTrainedModel(XcvPreTrainedModel):
    config_class = TransformerConfig
    config: TransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["TransformerEncoderLayer", "TransformerDecoderLayer"]
    _supports_sdpa = True  # flash / flex take no dense padding mask in the `full` core, and both stacks pass one
    _task_head_modules = ("lm_head",)
    attention_requests = TRANSFORMER_ATTENTION_REQUESTS
    attention_role = "an encoder-decoder"

    def _init_weights(self, module: nn.Module) -> None:
        init_sequence_model_weights(module, self.config.init_std)

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict[str, str]:
        # transformers ties only under config.tie_word_embeddings; sharing the source and target embeddings
        # is a separate choice (share_encoder_decoder_embeddings), so each class lists its own ties.
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return dict(self._tied_weights_keys or {})


class TransformerModel(TransformerPreTrainedModel):
    """The bare encoder-decoder: decoder hidden states (B, T, d_model) and the encoder output."""

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.encoder = TransformerEncoder(config)
        self.decoder = TransformerDecoder(config)
        shared = config.share_encoder_decoder_embeddings
        self._tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"} if shared else {}
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value
        if self.config.share_encoder_decoder_embeddings:
            self.decoder.embed_tokens = value

    # get_encoder is transformers' own: the text encoder for modality None, the model itself for "image" and
    # "audio" (there is no such encoder), which exporters read as "not multimodal".

    def get_decoder(self) -> TransformerDecoder:
        return self.decoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple[torch.Tensor, ...] | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        *,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqModelOutput:
        r"""
        Args:
            input_ids: (batch, source_length) source token ids; attention_mask: (batch, source_length) 1/0.
            decoder_input_ids: (batch, target_length) target prefix, starting with ``decoder_start_token_id``.
            decoder_attention_mask: (batch, past + target_length) 1/0; the causal mask is always applied.
            encoder_outputs: a previous encoder output to reuse (as ``generate`` does).
            cache: an ``EncoderDecoderCache`` from the previous step (incremental decoding).

        Returns:
            last_hidden_state (batch, target_length, d_model), cache, encoder_last_hidden_state, and the
            hidden states / attention maps of both stacks on request.
        """
        cache = self.take_cache(cache, kwargs)
        self.take_kwargs(kwargs)
        attentions, hidden = self._resolve_outputs(output_attentions, output_hidden_states)
        outputs = {"output_attentions": attentions, "output_hidden_states": hidden}  # asked of both stacks
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError("pass decoder_input_ids (the target prefix) or, to the generation model, labels")
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **outputs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoded = self.decoder(
            decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=self.config.use_cache if use_cache is None else use_cache,
            **outputs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoded.last_hidden_state,
            cache=decoded.cache,
            decoder_hidden_states=decoded.hidden_states,
            decoder_attentions=decoded.attentions,
            cross_attentions=decoded.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class TransformerForConditionalGeneration(TransformerPreTrainedModel, XcvGenerationMixin):
    """Encoder-decoder with the output projection to the target vocabulary; ``generate`` translates."""

    _is_task_model = True
    _honoured_kwargs = frozenset({"num_items_in_batch"})  # Trainer's loss normalisation

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.model = TransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.decoder_vocab_size, bias=config.lm_head_bias)
        embeddings = "encoder" if config.share_encoder_decoder_embeddings else "decoder"
        tie = config.tie_word_embeddings
        self._tied_weights_keys = {"lm_head.weight": f"model.{embeddings}.embed_tokens.weight"} if tie else {}
        self.post_init()

    def get_decoder(self) -> TransformerDecoder:
        return self.model.decoder

    def generation_length_limit(self) -> int:
        return self.config.max_position_embeddings + 1  # decoder tokens fed back, plus the last one generated

    def _resize_token_embeddings(self, new_num_tokens: int, pad_to_multiple_of: int | None = None, *args: Any):
        """The source vocabulary (``resize_token_embeddings``); with shared embeddings also the target side:
        the decoder's embeddings, ``lm_head`` and ``decoder_vocab_size``."""
        old = self.get_input_embeddings()
        self.set_input_embeddings(self._get_resized_embeddings(old, new_num_tokens, pad_to_multiple_of))
        if self.config.share_encoder_decoder_embeddings:
            self._resize_target_side(self.get_input_embeddings().num_embeddings)
        return self.get_input_embeddings()

    def resize_decoder_token_embeddings(self, new_num_tokens: int) -> nn.Embedding:
        """The target vocabulary of a model whose source and target embeddings are separate (as transformers'
        Marian): the decoder's embeddings, ``lm_head`` and ``config.decoder_vocab_size``."""
        if self.config.share_encoder_decoder_embeddings:
            raise ValueError("source and target share their embeddings: resize both with resize_token_embeddings")
        decoder = self.model.decoder
        decoder.embed_tokens = self._get_resized_embeddings(decoder.embed_tokens, new_num_tokens)
        self._resize_target_side(new_num_tokens)
        self.tie_weights()
        return decoder.embed_tokens

    def _resize_target_side(self, new_num_tokens: int) -> None:
        if not self.config.tie_word_embeddings:
            self.lm_head = self._get_resized_lm_head(self.lm_head, new_num_tokens)
        self.config.decoder_vocab_size = new_num_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple[torch.Tensor, ...] | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        *,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> Seq2SeqLMOutput:
        r"""The other arguments are :class:`TransformerModel`'s; of ``kwargs``, ``num_items_in_batch`` (from Trainer)
        normalises the loss over gradient accumulation, and any other key is refused.

        Args:
            labels: (batch, target_length) target ids ending in ``</s>``, -100 where ignored. Without
                ``decoder_input_ids`` they are shifted right behind ``decoder_start_token_id`` (teacher forcing).

        Returns:
            loss (label-smoothed cross-entropy, with labels), logits (batch, target_length, decoder_vocab_size),
            cache, and the outputs of :class:`TransformerModel`.
        """
        cache = self.take_cache(cache, kwargs)
        loss_kwargs = self.take_kwargs(kwargs)
        if labels is not None:
            if labels.dim() != 2 or labels.shape[1] == 0:
                raise ValueError(
                    f"labels must be (batch, target_length >= 1) token ids, got shape {tuple(labels.shape)}"
                )
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids,
            attention_mask,
            decoder_input_ids,
            decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, T, decoder_vocab_size)
        loss = None
        if labels is not None:
            loss = label_smoothed_loss(logits, labels, self.config.label_smoothing, **loss_kwargs)
        return Seq2SeqLMOutput(
            loss=loss, logits=logits, **{k: v for k, v in outputs.items() if k != "last_hidden_state"}
        )
