"""Convert an official TTSR checkpoint (researchmm/TTSR's ``TTSR.pt`` or ``TTSR-rec.pt``, a plain state dict) to
hf_xcv format on disk.

    hf-xcv-convert ttsr --input TTSR.pt --output ttsr-xcv [--verify]
    python -m hf_xcv.convert ttsr ...    (in a checkout also: python -m conversion.ttsr ...)

The mapping is ``hf_xcv.conversion.ttsr`` (the config read from the shapes; a DataParallel ``module.`` prefix
stripped; ``LTE_copy`` and ``SearchNet`` keys dropped; the MeanShift ``LTE.sub_mean`` checked to be the ImageNet
normalisation hf_xcv builds in, and dropped). Every key is renamed or explicitly dropped; anything else, a missing
weight or a wrong shape is an error and nothing is written. The output holds config.json, model.safetensors and the
preprocessor_config.json of ``TTSRImageProcessor()`` (the original's data pipeline).
``--verify`` runs the converted model and ``hf_xcv.conversion.ttsr_reference`` (the official forward pass computed
from the source's own weights and names: dense relevance, unfold / gather / fold, the MeanShift convolution) on the
same random inputs (a batch of two, LR 10x12, reference 48x40, with their bicubic companions), in float64 so that
the hard attention's arg-max cannot flip on a float32 near-tie, prints the largest difference of the
reconstruction, S and the three T levels, and deletes the output again when one exceeds ``--tolerance`` (float64
rounding leaves about 1e-15; a misplaced weight changes them by 1e-3 or more).
"""

from __future__ import annotations

import argparse
import sys

import torch

import hf_xcv
from hf_xcv.conversion import ttsr as mapping
from hf_xcv.conversion.ttsr_reference import compare_with_original, random_inputs
from hf_xcv.models.ttsr.conversion_ttsr import convert_official

from .conversion import check_deltas, run, write_converted

VERIFY_SHAPES = {"batch": 2, "lr_size": (10, 12), "ref_size": (48, 40)}


def convert_file(source: str, output: str, overwrite: bool = False) -> list[str]:
    """Write the hf_xcv folder of an official ``.pt`` (config, weights, processor) atomically; returns the keys
    dropped."""
    config, state_dict, dropped = convert_official(mapping.load_original(source), source)
    processor = hf_xcv.TTSRImageProcessor()
    write_converted(config, state_dict, processor, output, mapping.TARGET_MODEL_TYPE, source, overwrite)
    return dropped


def verify(source: str, converted: str, tolerance: float, revision: str | None = None) -> float:
    """Largest |difference| between the converted model and the functional reference on the source's weights, over
    the reconstruction, S and T_lv3 / T_lv2 / T_lv1, in float64; a ValueError above ``tolerance``."""
    original = mapping.strip_data_parallel(mapping.load_original(source))
    model = hf_xcv.TTSRForReferenceSuperResolution.from_pretrained(converted).double().eval()
    inputs = random_inputs(**VERIFY_SHAPES, seed=0, dtype=torch.float64)
    deltas = compare_with_original(model, original, inputs)
    print("max |delta| vs the official forward pass (float64): " + ", ".join(f"{k} {v:.2e}" for k, v in deltas.items()))
    return check_deltas(deltas, tolerance)


def _convert(args: argparse.Namespace) -> list[str]:
    return convert_file(args.input, args.output, args.overwrite)


def main(argv: list[str] | None = None) -> None:
    source = "official TTSR (TTSR.pt / TTSR-rec.pt)"
    run(argv, __doc__, mapping.TARGET_MODEL_TYPE, verify, source, None, _convert, input_kinds="a .pt file")


if __name__ == "__main__":
    main(sys.argv[1:])
