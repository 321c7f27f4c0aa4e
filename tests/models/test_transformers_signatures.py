"""Code written for transformers' models calls ours the same way: every public ``forward`` of every registered class
(and of the sub-modules users reach through ``get_encoder()`` / ``get_decoder()``) takes positionally exactly the
leading arguments that transformers' counterpart takes positionally, in the same order, up to the first one we do not
have; the rest is keyword-only, and unknown keywords stay refused."""

from __future__ import annotations

import inspect

import pytest
import torch
import transformers
from marian_testing import random_marian
from transformers import MarianModel
from transformers.models.marian.modeling_marian import MarianDecoder, MarianEncoder

import hf_xcv
from hf_xcv.registry import MODEL_TYPES

# Our class -> transformers' counterpart, by name; a family whose classes are named as transformers' own needs none.
COUNTERPARTS = {
    "TransformerModel": "MarianModel",
    "TransformerForConditionalGeneration": "MarianMTModel",
    "XFormerModel": "BertModel",
    "XFormerForSequenceClassification": "BertForSequenceClassification",
    "XFormerForCausalLM": "BertLMHeadModel",
}
SAME_NAMES = ("xcv_vit", "xcv_swin", "xcv_detr", "xcv_deformable_detr")
# Families transformers does not have: what is natural to pass positionally, as documented.
TTSR_IMAGES = ["pixel_values", "upsampled_pixel_values", "reference_pixel_values", "degraded_reference_pixel_values"]
OWN_PREFIXES = {
    "TTSRModel": TTSR_IMAGES,
    "TTSRForReferenceSuperResolution": [*TTSR_IMAGES, "labels"],
    "IPTModel": ["pixel_values", "task"],
    "IPTForImageRestoration": ["pixel_values", "task", "labels"],
}


def positional(cls: type) -> list[str]:
    """The parameters of ``cls.forward`` that may be passed by position (``self`` left out)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in inspect.signature(cls.forward).parameters.values() if p.kind in kinds][1:]


def accepted(cls: type) -> set[str]:
    """Every named parameter of ``cls.forward`` (positional or keyword-only)."""
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {p.name for p in inspect.signature(cls.forward).parameters.values() if p.kind not in skip} - {"self"}


def expected_prefix(ours: type, theirs: type) -> list[str]:
    """The rule: the longest leading run of ``theirs``' positional parameters that ``ours`` accepts, by name."""
    names = accepted(ours)
    prefix = []
    for name in positional(theirs):
        if name not in names:
            break
        prefix.append(name)
    return prefix


REGISTERED = [(model_type, cls) for model_type, entry in MODEL_TYPES.items() for cls in entry.model_classes]


@pytest.mark.parametrize("model_type, cls", REGISTERED, ids=[cls.__name__ for _, cls in REGISTERED])
def test_the_positional_prefix_is_transformers_counterparts(model_type, cls):
    name = cls.__name__
    if name in OWN_PREFIXES:
        assert positional(cls) == OWN_PREFIXES[name]
        return
    counterpart = COUNTERPARTS.get(name, name if model_type in SAME_NAMES else None)
    assert counterpart is not None, f"{name} has no declared transformers counterpart nor an own positional prefix"
    theirs = getattr(transformers, counterpart)
    prefix = expected_prefix(cls, theirs)
    assert prefix, f"{name} accepts not even the first positional argument of {counterpart}"
    assert positional(cls) == prefix, f"{name}: {positional(cls)} positional; {counterpart} gives {prefix}"


@pytest.mark.parametrize(
    "accessor, theirs", [("get_encoder", MarianEncoder), ("get_decoder", MarianDecoder)], ids=["encoder", "decoder"]
)
def test_the_transformers_encoder_and_decoder_take_marians_positional_arguments(accessor, theirs):
    model = hf_xcv.TransformerForConditionalGeneration(hf_xcv.preset_config("transformer-test-tiny"))
    stack = type(getattr(model, accessor)())
    assert positional(stack) == expected_prefix(stack, theirs) == positional(theirs)


def test_positional_calls_read_what_marians_do_on_the_same_weights(tmp_path):
    theirs = random_marian(MarianModel, seed=1)
    theirs.save_pretrained(tmp_path)
    ours = hf_xcv.TransformerModel.from_pretrained(tmp_path).eval()  # converted on load
    ids = torch.randint(1, 59, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    targets = torch.randint(1, 59, (2, 4), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = theirs.get_encoder()(ids, mask), ours.get_encoder()(ids, mask)
        torch.testing.assert_close(b.last_hidden_state, a.last_hidden_state, atol=1e-4, rtol=1e-4)
        memory = a.last_hidden_state
        a = theirs.get_decoder()(targets, None, memory, mask)
        b = ours.get_decoder()(targets, None, memory, mask)
        torch.testing.assert_close(b.last_hidden_state, a.last_hidden_state, atol=1e-4, rtol=1e-4)
        a, b = theirs(ids, mask, targets), ours(ids, mask, targets)
        torch.testing.assert_close(b.last_hidden_state, a.last_hidden_state, atol=1e-4, rtol=1e-4)


def test_arguments_past_the_prefix_are_keyword_only_and_unknown_keywords_refused():
    model = hf_xcv.DetrForObjectDetection(hf_xcv.preset_config("detr-test-tiny")).eval()
    pixels = torch.randn(1, 3, 64, 64)
    with pytest.raises(TypeError, match="positional"):
        model(pixels, None, [])  # labels come after transformers' decoder_attention_mask, which we do not take
    with pytest.raises(ValueError, match="unexpected arguments"):
        model(pixels, decoder_attention_mask=torch.ones(1, 100))
