"""Generic X-former sequence models: a pre-LN Transformer around any attention entry of the registry.

Reads top to bottom: Embeddings -> AttentionBlock / FeedForwardBlock -> Layer -> Model ->
ForSequenceClassification / ForCausalLM. The attention core comes from ``config.attention_type``; cores
with memory (Transformer-XL, Compressive) carry it from call to call as ``mems``, cores with auxiliary
losses (Routing's k-means commitment, Compressive's reconstruction) add them to the training loss, and the
blocks may be reversible with chunked feed-forward (Reformer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMode
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from ...attention import MultiHeadAttention, PoolingByMultiheadAttention, get_attention_class
from ...layers import Mlp, SinusoidalPositionEmbedding, check_range, is_tracing
from ...layers.reversible import ChunkedFeedForward, ReversibleSequence
from ...modeling_utils import XcvGenerationMixin, XcvPreTrainedModel, init_sequence_model_weights
from ...utils.checks import check_batch_not_empty
from .configuration_xformer import XFormerConfig


@dataclass
class XFormerModelOutput(ModelOutput):
    """Outputs of :class:`XFormerModel`.

    Args:
        last_hidden_state: (batch, length, hidden_size), after the final LayerNorm.
        mems: one memory per layer for stateful cores (pass back as ``mems=`` with the next segment).
        cache: keys and values of earlier steps (``full`` attention during generation).
        hidden_states: the embeddings and every block's output.
        attentions: every layer's attention probabilities (cores that return them).
        aux_loss: the weighted sum of the cores' auxiliary losses (None when no core has one).
    """

    last_hidden_state: torch.Tensor | None = None
    mems: tuple[Any, ...] | None = None
    cache: Cache | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    aux_loss: torch.Tensor | None = None


@dataclass
class XFormerCausalLMOutput(ModelOutput):
    """Outputs of :class:`XFormerForCausalLM`: ``loss`` (next-token cross-entropy plus auxiliary losses),
    ``logits`` (batch, length, vocab_size), and the fields of :class:`XFormerModelOutput`."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    mems: tuple[Any, ...] | None = None
    cache: Cache | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    aux_loss: torch.Tensor | None = None


class XFormerEmbeddings(nn.Module):
    """Token embeddings plus absolute positions (learned, sinusoidal, or none for relative cores)."""

    def __init__(self, config: XFormerConfig):
        super().__init__()
        self.max_positions = config.max_position_embeddings
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        if config.position_embedding_type == "learned":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        elif config.position_embedding_type == "sinusoidal":
            self.position_embeddings = SinusoidalPositionEmbedding(config.max_position_embeddings, config.hidden_size)
        else:
            self.position_embeddings = None
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """(B, L) ids and positions -> (B, L, C)."""
        vocab = self.word_embeddings.num_embeddings  # resize_token_embeddings changes it
        check_range(input_ids, 0, vocab, "token ids", "the vocabulary; ids outside the vocabulary have no embedding")
        hidden = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            meaning = (
                f"max_position_embeddings={self.max_positions}: truncate the input, or use a core with relative "
                "positions and position_embedding_type='none'"
            )
            check_range(position_ids, 0, self.max_positions, "positions", meaning)
            hidden = hidden + self.position_embeddings(position_ids)
        return self.dropout(hidden)


class XFormerAttentionBlock(nn.Module):
    """The residual branch LN -> attention -> dropout (its output is *added* to the stream by the layer)."""

    def __init__(self, config: XFormerConfig, layer_idx: int):
        super().__init__()
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = MultiHeadAttention(
            config.hidden_size,
            config.num_attention_heads,
            attention_type=config.attention_type,
            attention_kwargs=config.attention_kwargs,
            dropout=config.attention_probs_dropout_prob,
            config=config,
            layer_idx=layer_idx,
        )
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        hidden_states: torch.Tensor,
        *,
        keep: torch.Tensor | None = None,
        causal: bool = False,
        state: Any = None,
        cache: Cache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
        attended, weights, new_state = self.attention(
            self.norm(hidden_states),
            attention_mask=keep,
            causal=causal,
            state=state,
            cache=cache,
            output_attentions=output_attentions,
        )
        return self.dropout(attended), weights, new_state


class _AttentionValues(nn.Module):
    """An attention block seen as a function of the stream only (what a reversible coupling needs)."""

    def __init__(self, block: XFormerAttentionBlock):
        super().__init__()
        self.block = block

    def forward(self, hidden_states: torch.Tensor, keep: torch.Tensor | None, causal: bool) -> torch.Tensor:
        return self.block(hidden_states, keep=keep, causal=causal)[0]


class XFormerFeedForwardBlock(nn.Module):
    """The residual branch LN -> feed-forward -> dropout, optionally applied in chunks of positions."""

    def __init__(self, config: XFormerConfig):
        super().__init__()
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        mlp = Mlp(
            config.hidden_size,
            config.intermediate_size,
            act=config.hidden_act,
            dropout=config.hidden_dropout_prob,
            out_dropout=0.0,
        )
        self.mlp = ChunkedFeedForward(mlp, config.feed_forward_chunk_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.mlp(self.norm(hidden_states)))


class XFormerLayer(GradientCheckpointingLayer):
    """Pre-LN block: x + Attn(LN(x)), then x + FFN(LN(x))."""

    def __init__(self, config: XFormerConfig, layer_idx: int):
        super().__init__()
        self.attention = XFormerAttentionBlock(config, layer_idx)
        self.feed_forward = XFormerFeedForwardBlock(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        *,
        keep: torch.Tensor | None = None,
        causal: bool = False,
        state: Any = None,
        cache: Cache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
        attended, weights, new_state = self.attention(
            hidden_states, keep=keep, causal=causal, state=state, cache=cache, output_attentions=output_attentions
        )
        hidden_states = hidden_states + attended
        hidden_states = hidden_states + self.feed_forward(hidden_states)
        return hidden_states, weights, new_state


class XFormerPreTrainedModel(XcvPreTrainedModel):
    config_class = XFormerConfig
    config: XFormerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    input_modalities = ("text",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["XFormerLayer"]
    _supports_sdpa = True
    _task_head_modules = ("classifier", "pooler", "lm_head")

    def _init_weights(self, module: nn.Module) -> None:
        # attention cores' own parameters (projections, centroids, inducing points) keep their construction values
        init_sequence_model_weights(module, self.config.initializer_range)


def padding_keep(attention_mask: torch.Tensor | None, input_ids: torch.Tensor, past: int = 0) -> torch.Tensor | None:
    """(B, 1, 1, past + L) boolean keep mask from a (B, past + L) 0/1 mask (with a cache it covers the cached
    tokens too); None when nothing is padded."""
    if attention_mask is None:
        return None
    expected = (input_ids.shape[0], past + input_ids.shape[1])
    if tuple(attention_mask.shape) != expected:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, expected {expected}"
            + (f" (input_ids plus {past} cached tokens)" if past else " like input_ids")
        )
    keep = attention_mask.bool()
    # Nothing padded: no mask (the fast path of sdpa). Asking reads the values: only on the CPU and in eager
    # calls, so that no decoding step on an accelerator waits for it and traced graphs do not branch on it.
    if not is_tracing() and keep.device.type == "cpu" and keep.all():
        return None
    return keep[:, None, None, :]


def _tuple_or_none(items: list | None) -> tuple | None:
    return tuple(items) if items is not None else None


def keeps_key_value_cache(config: XFormerConfig) -> bool:
    """Only ``full`` attention reuses cached keys and values; other cores recompute the prefix each step."""
    return config.attention_type == "full" and not config.reversible


class XFormerModel(XFormerPreTrainedModel):
    """Embeddings -> blocks -> final LayerNorm. Bidirectional unless ``causal=True`` (the LM head sets it)."""

    def __init__(self, config: XFormerConfig):
        super().__init__(config)
        self.embeddings = XFormerEmbeddings(config)
        self.layers = nn.ModuleList([XFormerLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.stateful = get_attention_class(config.attention_type).capabilities.stateful
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def aux_losses(self) -> torch.Tensor | None:
        """The weighted sum of the auxiliary losses the attention cores left from the last call."""
        losses = [layer.attention.attention.aux_loss for layer in self.layers]
        losses = [loss for loss in losses if loss is not None]
        if not losses:
            return None
        return self.config.aux_loss_weight * torch.stack(losses).sum()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor | None = None,
        mems: tuple[Any, ...] | list[Any] | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        causal: bool = False,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> XFormerModelOutput:
        r"""
        Args:
            input_ids: (batch, length) token ids.
            attention_mask: (batch, length) 1 for real tokens, 0 for padding; with a ``cache``, it covers the
                cached tokens as well.
            position_ids: (batch, length) absolute positions; by default counted over real tokens.
            mems: the ``mems`` of the previous call (stateful cores such as Transformer-XL).
            cache: keys and values of earlier steps (``full`` attention, during generation).
            causal: autoregressive masking (set by :class:`XFormerForCausalLM`).

        Returns:
            :class:`XFormerModelOutput`.
        """
        cache = self.take_cache(cache, kwargs)
        self.take_kwargs(kwargs)
        output_attentions, output_hidden_states = self._resolve_outputs(output_attentions, output_hidden_states)
        self._check_inputs(input_ids, mems)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if not (causal and use_cache and keeps_key_value_cache(self.config)) or self.training:
            cache = None  # only full attention keeps keys and values (at inference); other cores recompute the prefix
        elif cache is None:
            cache = DynamicCache()
        past = cache.get_seq_length() if cache is not None else 0
        keep = padding_keep(attention_mask, input_ids, past)
        if position_ids is None:
            position_ids = self._positions(attention_mask, input_ids, past)
        hidden_states = self.embeddings(input_ids, position_ids)
        if self.config.reversible:
            if output_attentions or output_hidden_states:
                raise ValueError("reversible=True blocks return no per-layer attentions or hidden states")
            hidden_states = self._reversible(hidden_states, keep, causal)
            new_mems = all_hidden = all_weights = None  # reversible models are stateless (checked by the config)
        else:
            hidden_states, new_mems, all_hidden, all_weights = self._run_layers(
                hidden_states, keep, causal, mems, cache, output_attentions, output_hidden_states
            )
        return XFormerModelOutput(
            last_hidden_state=self.norm(hidden_states),
            mems=new_mems,
            cache=cache,
            hidden_states=all_hidden,
            attentions=all_weights,
            aux_loss=self.aux_losses(),
        )

    def _check_inputs(self, input_ids: torch.Tensor | None, mems: tuple[Any, ...] | list[Any] | None) -> None:
        if input_ids is None or input_ids.dim() != 2 or input_ids.shape[1] == 0:
            shape = None if input_ids is None else tuple(input_ids.shape)
            raise ValueError(f"input_ids must be a non-empty (batch, length) tensor, got {shape}")
        check_batch_not_empty("input_ids", input_ids)
        if mems is not None and not self.stateful:
            raise ValueError(f"mems were passed, but attention_type={self.config.attention_type!r} keeps no memory")
        if mems is not None and len(mems) != len(self.layers):
            raise ValueError(f"mems holds {len(mems)} layer memories; the model has {len(self.layers)} layers")

    def _run_layers(
        self,
        hidden_states: torch.Tensor,
        keep: torch.Tensor | None,
        causal: bool,
        mems: tuple[Any, ...] | list[Any] | None,
        cache: Cache | None,
        output_attentions: bool,
        output_hidden_states: bool,
    ) -> tuple[torch.Tensor, tuple | None, tuple | None, tuple | None]:
        """The blocks one after another: (output, new mems, hidden states, attentions); None for what is not kept."""
        all_hidden = [hidden_states] if output_hidden_states else None
        all_weights = [] if output_attentions else None
        new_mems = [] if self.stateful else None
        for i, layer in enumerate(self.layers):
            state = mems[i] if mems is not None else None
            hidden_states, weights, new_state = layer(
                hidden_states, keep=keep, causal=causal, state=state, cache=cache, output_attentions=output_attentions
            )
            if self.stateful:
                new_mems.append(new_state)
            if output_hidden_states:
                all_hidden.append(hidden_states)
            if output_attentions:
                all_weights.append(weights)
        return hidden_states, _tuple_or_none(new_mems), _tuple_or_none(all_hidden), _tuple_or_none(all_weights)

    def _reversible(self, hidden_states: torch.Tensor, keep: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """Reformer's reversible stack over the same blocks: (x, x) in, the mean of the two streams out."""
        blocks = [(_AttentionValues(layer.attention), layer.feed_forward) for layer in self.layers]
        # Built per call and not registered: the blocks' parameters belong to self.layers (one state-dict key each).
        return ReversibleSequence(blocks)(hidden_states, keep=keep, causal=causal)

    @staticmethod
    def _positions(attention_mask: torch.Tensor | None, input_ids: torch.Tensor, past: int) -> torch.Tensor:
        """Positions counted over real tokens (left padding does not shift them), continuing after the cache."""
        length = input_ids.shape[1]
        if attention_mask is None:
            return torch.arange(past, past + length, device=input_ids.device).expand_as(input_ids)
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return positions[:, -length:]


class XFormerForSequenceClassification(XFormerPreTrainedModel):
    """Pooled tokens -> dropout -> Linear. Loss by ``config.problem_type`` (regression, single or multi label)."""

    attention_requests = {}  # bidirectional attention over a sequence (padding only where the batch has it)
    attention_role = "sequence classification"
    _honoured_kwargs = frozenset({"num_items_in_batch"})  # Trainer's loss normalisation

    def __init__(self, config: XFormerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = XFormerModel(config)
        self.pooler = None
        if config.pooling == "pma":
            self.pooler = PoolingByMultiheadAttention(config.hidden_size, config.num_attention_heads)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, L, C) -> (B, C) over the real tokens."""
        real = torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device)
        if attention_mask is not None:
            real = attention_mask.bool()
        if not is_tracing() and not real.any(-1).all():
            empty = (~real.any(-1)).nonzero().flatten().tolist()
            raise ValueError(f"attention_mask marks every token of batch rows {empty} as padding")
        if self.config.pooling == "first":
            return hidden[torch.arange(hidden.shape[0]), real.long().argmax(-1)]
        if self.config.pooling == "last":
            last = real.shape[1] - 1 - real.flip(-1).long().argmax(-1)
            return hidden[torch.arange(hidden.shape[0]), last]
        if self.config.pooling == "pma":
            return self.pooler(hidden, real)[:, 0]
        weights = real.to(hidden.dtype)[..., None]
        return (hidden * weights).sum(1) / weights.sum(1)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> SequenceClassifierOutput:
        r"""
        Args:
            input_ids / attention_mask: as for :class:`XFormerModel`.
            labels: (batch,) class ids, (batch,) floats for regression (``num_labels=1``), or (batch,
                num_labels) multi-hot targets.
            kwargs: ``num_items_in_batch`` (from Trainer) normalises the loss over gradient accumulation; any
                other key is refused.
        """
        loss_kwargs = self.take_kwargs(kwargs)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            use_cache=False,
            return_dict=True,
        )
        logits = self.classifier(self.dropout(self.pool(outputs.last_hidden_state, attention_mask)))
        loss = None
        if labels is not None:
            loss = self.classification_loss(labels, logits, **loss_kwargs)
            if outputs.aux_loss is not None and self.training:
                loss = loss + outputs.aux_loss
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class XFormerForCausalLM(XFormerPreTrainedModel, XcvGenerationMixin):
    """Causal language model: next-token logits, memory across segments, ``generate``."""

    _tied_weights_keys = {"lm_head.weight": "model.embeddings.word_embeddings.weight"}
    attention_requests = {"causal": True}
    attention_role = "a causal language model"
    # Trainer's loss normalisation, and labels it already shifted (context parallelism)
    _honoured_kwargs = frozenset({"num_items_in_batch", "shift_labels"})

    def __init__(self, config: XFormerConfig):
        super().__init__(config)
        self.model = XFormerModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embeddings.word_embeddings

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    @property
    def keeps_key_value_cache(self) -> bool:
        return self.config.use_cache and keeps_key_value_cache(self.config)

    @property
    def _is_stateful(self) -> bool:
        # A core without a key/value cache recomputes the whole prefix each step: there is no cache to crop back
        # to the tokens a draft model got right. transformers < 5.25 refuses assisted decoding for "stateful"
        # models itself; later versions no longer look at this flag, so _validate_generation_mode refuses too.
        return not keeps_key_value_cache(self.config)

    def _validate_generation_mode(self, generation_mode, generation_config, generation_mode_kwargs):
        if generation_mode == GenerationMode.ASSISTED_GENERATION and self._is_stateful:
            raise ValueError(
                f"assisted generation is not supported with stateful models, such as {type(self).__name__} with "
                f"attention_type={self.config.attention_type!r}: it keeps no key/value cache that could be cropped "
                "back to the draft tokens it accepts (use an attention with a key/value cache, or plain decoding)"
            )
        return super()._validate_generation_mode(generation_mode, generation_config, generation_mode_kwargs)

    def generation_length_limit(self) -> int | None:
        if self.model.embeddings.position_embeddings is None:  # relative positions: no limit
            return None
        return self.config.max_position_embeddings + 1  # tokens fed back, plus the last one generated

    def prepare_inputs_for_generation(self, input_ids, next_sequence_length=None, cache=None, **kwargs):
        if not self.keeps_key_value_cache:  # cores without a key/value cache see the whole prefix each step
            next_sequence_length, cache = None, None
            kwargs.pop("position_ids", None)
        inputs = super().prepare_inputs_for_generation(
            input_ids, next_sequence_length=next_sequence_length, cache=cache, **kwargs
        )
        if not self.keeps_key_value_cache:
            inputs.pop("cache", None)
        return inputs

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        mems: tuple[Any, ...] | list[Any] | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,
        **kwargs: Any,
    ) -> XFormerCausalLMOutput:
        r"""
        Args:
            input_ids / attention_mask / position_ids / mems / cache: as for :class:`XFormerModel`.
            labels: (batch, length) targets aligned with ``input_ids`` (shifted inside; -100 is ignored).
            logits_to_keep: compute logits for only the last this many positions (0 = all).
            kwargs: ``num_items_in_batch`` (from Trainer) normalises the loss over gradient accumulation;
                ``shift_labels`` (batch, length) are targets already shifted (Trainer under context parallelism),
                used instead of shifting ``labels``; any other key is refused.
        """
        cache = self.take_cache(cache, kwargs)
        loss_kwargs = self.take_kwargs(kwargs)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            mems=mems,
            cache=cache,
            use_cache=use_cache,
            causal=True,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        hidden = outputs.last_hidden_state
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        logits = self.lm_head(hidden)
        loss = None
        if labels is not None or "shift_labels" in loss_kwargs:
            for name, targets in (("labels", labels), ("shift_labels", loss_kwargs.get("shift_labels"))):
                if targets is not None and targets.shape != input_ids.shape:
                    raise ValueError(f"{name} have shape {tuple(targets.shape)}, expected {tuple(input_ids.shape)}")
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **loss_kwargs)
            if outputs.aux_loss is not None and self.training:
                loss = loss + outputs.aux_loss
        return XFormerCausalLMOutput(
            loss=loss,
            logits=logits,
            mems=outputs.mems,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            aux_loss=outputs.aux_loss,
        )
