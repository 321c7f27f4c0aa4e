"""LoRA with peft's standard recipe (no target_modules) on every task model: the defaults adapt the attention's
projections (deformable attention's too); an adapter trained in train mode, saved and reloaded on a fresh base model
gives the trained model's outputs, and so does the merged model; the base's state does not move while it trains."""

from __future__ import annotations

import json
import re

import pytest
import torch
from helpers import check, run_python
from model_testing import HEADS, assert_close_at_scale, main_output, make_inputs, tiny_config
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import constants
from torch import nn

from hf_xcv import MODEL_TYPES, DeformableDetrForObjectDetection, DetrForObjectDetection
from hf_xcv.integrations import ADAPTER_MODULE_NAMES

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
DEFORMABLE = {"sampling_offsets", "attention_weights", "value_proj", "output_proj"}


def own_names(model_type: str, *names: str) -> set[str]:
    """hf_xcv's standard adapter module names as the type calls them (TTSR's convolutions)."""
    renames = MODEL_TYPES[model_type].adapter_module_names
    return {renames.get(name, name) for name in names}


def trainable_config(model_type: str):
    """The tiny config, with ordinary BatchNorm in a detector's backbone (the from-scratch recipe's): running
    statistics that a training step changes."""
    config = tiny_config(model_type)
    return tiny_config(model_type, freeze_batch_norm=False) if hasattr(config, "freeze_batch_norm") else config


def changed_base_tensors(model: PeftModel, base: nn.Module) -> list[str]:
    """The parameters and buffers of ``base`` that the adapted ``model`` no longer holds as they were."""
    held = {}
    for key, tensor in model.get_base_model().state_dict().items():
        if "lora_" not in key and ".modules_to_save." not in key:
            held[key.replace(".base_layer.", ".").replace(".original_module.", ".")] = tensor
    return sorted(
        key for key, tensor in base.state_dict().items() if key not in held or not torch.equal(held[key], tensor)
    )


def output_tensors(outputs) -> dict[str, torch.Tensor]:
    """Every tensor of an output but the loss: a detector's logits and boxes, a reconstruction, ..."""
    return {key: value for key, value in outputs.items() if key != "loss" and isinstance(value, torch.Tensor)}


def test_every_model_type_has_peft_defaults_that_name_its_modules():
    for model_type, entry in MODEL_TYPES.items():
        targets = set(constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING[model_type])
        assert targets == own_names(model_type, *ATTENTION) | (set() if entry.adapter_module_names else DEFORMABLE)
        feed_forward = constants.TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING[model_type]
        assert set(feed_forward) == own_names(model_type, "fc2")
        assert set(feed_forward) <= set(constants.TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING[model_type])
        names = {name.rsplit(".", 1)[-1] for name, _ in entry.base_model(tiny_config(model_type)).named_modules()}
        assert own_names(model_type, *ADAPTER_MODULE_NAMES) <= names, model_type


def test_peft_tables_change_only_by_hf_xcvs_own_types(subprocess_env):
    code = (
        "import json; from peft.utils import constants as c; "
        "print(json.dumps(c.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING))"
    )
    alone = json.loads(check(run_python(code, subprocess_env)).stdout)
    current = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    assert {k: v for k, v in current.items() if not k.startswith("xcv_")} == alone


def test_deformable_detrs_default_targets_are_its_attention():
    model = get_peft_model(DeformableDetrForObjectDetection(tiny_config("xcv_deformable_detr")), LoraConfig())
    adapted = {re.sub(r"\.\d+\.", ".N.", name) for name in model.base_model.targeted_module_names}
    assert adapted == {
        *(f"model.encoder.layers.N.self_attn.{name}" for name in DEFORMABLE),
        *(f"model.decoder.layers.N.encoder_attn.{name}" for name in DEFORMABLE),
        *(f"model.decoder.layers.N.self_attn.{name}" for name in ATTENTION),
    }


def test_batch_norm_with_frozen_parameters_keeps_its_statistics_in_train_mode():
    model = DetrForObjectDetection(trainable_config("xcv_detr"))
    norms = [module for module in model.modules() if isinstance(module, nn.BatchNorm2d)]
    assert norms and all(norm.training for norm in norms)
    adapted = get_peft_model(model, LoraConfig()).train()  # peft freezes every base parameter
    assert not any(norm.training for norm in norms)
    norms[0].requires_grad_(True)  # a BatchNorm that trains updates its statistics
    adapted.train()
    assert [norm.training for norm in norms] == [True] + [False] * (len(norms) - 1)
    model = DetrForObjectDetection(trainable_config("xcv_detr"))
    model.freeze_backbone()
    assert not any(module.training for module in model.train().modules() if isinstance(module, nn.BatchNorm2d))


@pytest.mark.parametrize("head_case", HEADS, ids=lambda case: case[2].__name__)
def test_lora_trains_saves_reloads_and_merges(head_case, tmp_path):
    model_type, _, head = head_case
    torch.manual_seed(0)
    head(trainable_config(model_type)).save_pretrained(tmp_path / "base")
    base = head.from_pretrained(tmp_path / "base")
    heads = [name for name in ("classifier",) if hasattr(base, name)]
    model = get_peft_model(head.from_pretrained(tmp_path / "base"), LoraConfig(r=4, modules_to_save=heads or None))
    adapted_modules = {name.rsplit(".", 1)[-1] for name in model.base_model.targeted_module_names}
    assert own_names(model_type, *ATTENTION) <= adapted_modules  # hf_xcv's registered defaults: the attention
    inputs = make_inputs(base)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(3):
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert changed_base_tensors(model, base) == []  # BatchNorm statistics included: the adapter does not hold them
    model.eval()
    model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(head.from_pretrained(tmp_path / "base"), tmp_path / "adapter").eval()
    plain_inputs = make_inputs(base, labels=False)
    with torch.no_grad():
        outputs = model(**plain_inputs)
        assert not torch.allclose(main_output(outputs), main_output(base(**plain_inputs)))  # it trained
        trained = output_tensors(outputs)
        for key, value in output_tensors(reloaded(**plain_inputs)).items():
            assert_close_at_scale(value, trained[key], atol=1e-5, rtol=0)
        merged = reloaded.merge_and_unload()
        assert type(merged) is head
        for key, value in output_tensors(merged(**plain_inputs)).items():
            assert_close_at_scale(value, trained[key], atol=1e-5, rtol=1e-4)
