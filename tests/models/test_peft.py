"""LoRA with peft's standard recipe (no target_modules) on every task model: train, save the adapter, reload
it on a fresh base model, merge, with the same outputs at each step."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import check, run_python
from model_testing import HEADS, assert_close_at_scale, main_output, make_inputs, tiny_config
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import constants

from hf_xcv import MODEL_TYPES
from hf_xcv.integrations import ADAPTER_MODULE_NAMES


def base(model_type: str, head: type):
    torch.manual_seed(0)
    return head(tiny_config(model_type)).eval()


def own_names(model_type: str, *names: str) -> set[str]:
    """hf_xcv's standard adapter module names as the type calls them (TTSR's convolutions)."""
    renames = MODEL_TYPES[model_type].adapter_module_names
    return {renames.get(name, name) for name in names}


def test_every_model_type_has_peft_defaults_that_name_its_modules():
    for model_type, entry in MODEL_TYPES.items():
        targets = constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING[model_type]
        assert set(targets) == own_names(model_type, "q_proj", "v_proj")
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


@pytest.mark.parametrize("head_case", HEADS, ids=lambda case: case[2].__name__)
def test_lora_trains_saves_reloads_and_merges(head_case, tmp_path):
    model_type, _, head = head_case
    heads = [name for name in ("classifier", "lm_head") if hasattr(head(tiny_config(model_type)), name)]
    config = LoraConfig(r=4, lora_alpha=8, modules_to_save=[h for h in heads if h == "classifier"] or None)
    model = get_peft_model(base(model_type, head), config)  # no target_modules: hf_xcv's registered defaults
    adapted_modules = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if "lora_A" in n}
    assert adapted_modules and adapted_modules <= own_names(model_type, "q_proj", "v_proj")
    assert any("lora_A" in n for n, _ in model.named_parameters())
    inputs = make_inputs(model.base_model.model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(3):
        loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    plain_inputs = make_inputs(model.base_model.model, labels=False)
    with torch.no_grad():
        adapted = main_output(model(**plain_inputs))
        assert not torch.allclose(adapted, main_output(base(model_type, head)(**plain_inputs)))  # it trained
    model.save_pretrained(tmp_path)
    assert (tmp_path / "adapter_model.safetensors").is_file()
    reloaded = PeftModel.from_pretrained(base(model_type, head), tmp_path).eval()
    merged = reloaded.merge_and_unload()
    assert type(merged) is head
    with torch.no_grad():
        assert_close_at_scale(main_output(reloaded(**plain_inputs)), adapted, atol=1e-6, rtol=1e-5)
        assert_close_at_scale(main_output(merged(**plain_inputs)), adapted, atol=1e-5, rtol=1e-4)
