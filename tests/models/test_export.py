"""Every registered model class exports: torch.export with static and dynamic shapes (a traced program run at
another batch size and length gives the eager outputs), and ONNX (dynamo) run in onnxruntime."""

from __future__ import annotations

import inspect

import numpy as np
import onnxruntime
import pytest
import torch
from model_testing import MODEL_CASES, assert_close_at_scale, case_id, make_inputs, tiny_config
from torch.export import Dim

import hf_xcv


def build(case):
    model_type, cls = case
    torch.manual_seed(0)
    return cls(tiny_config(model_type)).eval()


def tensors_of(model, batch: int = 2, shorten: int = 0) -> dict[str, torch.Tensor]:
    """The model's dummy inputs without labels; ``shorten`` cuts token sequences (not images, nor their pixel
    masks) at the end."""
    inputs = {k: v for k, v in make_inputs(model, batch=batch, labels=False).items() if isinstance(v, torch.Tensor)}
    if shorten:
        sequences = [
            k for k, v in inputs.items() if (v.dtype == torch.long or k.endswith("mask")) and k != "pixel_mask"
        ]
        inputs = {k: v[:, :-shorten] if k in sequences else v for k, v in inputs.items()}
    return inputs


def settings(model) -> dict:
    """Arguments that are no tensors: the dummy inputs' settings of the call (IPT's task), and what keeps the output a
    tuple of tensors (no key/value cache in the graph)."""
    extra = {k: v for k, v in make_inputs(model, labels=False).items() if not isinstance(v, torch.Tensor)}
    return {**extra, "use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else extra


def first_output(outputs) -> torch.Tensor:
    return outputs[0] if isinstance(outputs, (tuple, list)) else next(iter(outputs.values()))


@pytest.mark.parametrize("case", MODEL_CASES, ids=case_id)
def test_torch_export_static_and_dynamic_shapes_give_the_eager_outputs(case):
    model = build(case)
    extra = settings(model)
    inputs = tensors_of(model)
    with torch.no_grad():
        expected = model(**inputs, **extra)[0]
    static = torch.export.export(model, (), kwargs={**inputs, **extra})
    assert_close_at_scale(first_output(static.module()(**inputs, **extra)), expected)
    # batch and sequence dimensions free (images keep their size): run at another batch size and length
    dynamic_shapes = {
        key: {dim: Dim.AUTO for dim in range(value.dim()) if key != "pixel_values" or dim == 0}
        for key, value in inputs.items()
    }
    dynamic = torch.export.export(
        model, (), kwargs={**inputs, **extra}, dynamic_shapes={**dynamic_shapes, **dict.fromkeys(extra)}
    )
    other = tensors_of(model, batch=3, shorten=2)
    with torch.no_grad():
        expected_other = model(**other, **extra)[0]
    assert_close_at_scale(first_output(dynamic.module()(**other, **extra)), expected_other)


class FirstOutput(torch.nn.Module):
    """The model called with named inputs, returning its first output (what ONNX graphs take and give)."""

    def __init__(self, model, names: list[str], extra: dict):
        super().__init__()
        self.model, self.names, self.extra = model, names, extra

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        first = self.model(**dict(zip(self.names, args)), **self.extra, return_dict=True)[0]
        return first if isinstance(first, torch.Tensor) else first[-1]  # a backbone: its last feature map


@pytest.mark.parametrize("case", MODEL_CASES, ids=case_id)
def test_onnx_export_runs_in_onnxruntime_with_the_eager_outputs(case, tmp_path):
    model = build(case)
    inputs = tensors_of(model)
    wrapped = FirstOutput(model, list(inputs), settings(model)).eval()
    with torch.no_grad():
        expected = wrapped(*inputs.values())
    program = torch.onnx.export(wrapped, tuple(inputs.values()), dynamo=True, input_names=list(inputs))
    program.save(str(tmp_path / "model.onnx"))
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"))
    (result,) = session.run(None, {name: value.numpy() for name, value in inputs.items()})
    scale = max(1.0, float(expected.abs().max()))  # IPT's values are 0-255, the others' about 1
    np.testing.assert_allclose(result, expected.numpy(), atol=1e-5 * scale, rtol=1e-4)


def test_swin_exports_through_transformers_exporter_with_a_free_batch():
    """transformers' ONNX exporter (torch.export with a dynamic batch, then its graph fixes) takes Swin: its window
    layout holds no data-dependent size (a nonzero() made one, on which the exporter stopped), and the graph run in
    onnxruntime at other batch sizes gives the eager outputs."""
    exporters = pytest.importorskip("transformers.exporters")
    model = build(("xcv_swin", hf_xcv.SwinForImageClassification))
    config = exporters.OnnxConfig(dynamic_shapes={"pixel_values": {0: Dim("batch")}})
    exported = exporters.OnnxExporter().export(model, tensors_of(model), config=config)
    for batch in (1, 3):
        inputs = tensors_of(model, batch=batch)
        with torch.no_grad():
            expected = model(**inputs).logits
        assert_close_at_scale(torch.as_tensor(exported(**inputs)["logits"]), expected)

