"""Convert an official IPT checkpoint (huawei-noah/Pretrained-IPT's ``IPT_sr2.pt``, ``IPT_sr3.pt``, ``IPT_sr4.pt``,
``IPT_denoise30.pt``, ``IPT_denoise50.pt``, ``IPT_derain.pt`` or ``IPT_pretrain.pt``, a plain state dict) to hf_xcv
format on disk.

    hf-xcv-convert ipt --input IPT_sr2.pt --output ipt-sr-x2-xcv [--verify]
    hf-xcv-convert ipt --input IPT_pretrain.pt --output ipt-pretrain-xcv [--tasks sr_x2,sr_x3,...] [--verify]
    python -m hf_xcv.convert ipt ...    (in a checkout also: python -m conversion.ipt ...)

The mapping is ``hf_xcv.conversion.ipt``: the config read from the shapes (n_feats, the body's tile and patch sizes,
the layers, the feed-forward width, each tail's scale; ``rgb_range`` from the MeanShifts, which are checked to be the
official ones and dropped), a DataParallel ``module.`` prefix stripped, the fused attention projections split. Every
key is renamed or explicitly dropped; anything else, a missing weight or a wrong shape is an error and nothing is
written. The output holds config.json, model.safetensors and the preprocessor_config.json of
``IPTImageProcessor(rgb_range=...)``.

What the weights cannot tell:

* the number of attention heads: ``--num_attention_heads`` (12, every official script's);
* the task names where the scales leave them open. One task of scale 2, 3 or 4 is ``sr_x2`` / ``sr_x3`` / ``sr_x4``.
  One task of scale 1 is ``denoise_30``, ``denoise_50`` or ``derain``: the released file name says which
  (IPT_denoise30.pt, IPT_denoise50.pt, IPT_derain.pt), otherwise pass ``--tasks``. Six tasks of scales 2, 3, 4, 1, 1,
  1 (IPT_pretrain.pt, MindSpore's ``--scale 2+3+4+1+1+1``) are read in the order sr_x2, sr_x3, sr_x4, denoise_30,
  denoise_50, derain. Which scale-1 task is which is recorded nowhere, and a third-party copy of MindSpore's
  pre-training data code orders them derain, denoise_30, denoise_50: ``--tasks`` overrides
  (``--tasks sr_x2,sr_x3,sr_x4,derain,denoise_30,denoise_50``).
  Any other layout needs ``--tasks``; names given must have the tails' scales (names of your own take them).

``--verify`` runs the converted model and ``hf_xcv.conversion.ipt_reference.official_forward`` (the official forward
pass computed from the source's own weights and names) on the same random one-tile image for every task, in float64,
prints the largest difference of each task's restoration and per-patch body features, and deletes the output again
when one exceeds ``--tolerance`` (float64 rounding leaves about 1e-12 on the 0-255 scale; a misplaced weight changes
the outputs by far more).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import torch

import hf_xcv
from hf_xcv.conversion import ipt as mapping
from hf_xcv.conversion.ipt_reference import official_forward, random_input
from hf_xcv.models.ipt.conversion_ipt import convert_official

from .conversion import check_deltas, run, write_converted


def convert_file(
    source: str,
    output: str,
    overwrite: bool = False,
    tasks: Sequence[str] | None = None,
    num_attention_heads: int = mapping.DEFAULT_NUM_HEADS,
    rgb_range: float | None = None,
) -> list[str]:
    """Write the hf_xcv folder of an official ``.pt`` (config, weights, processor) atomically; returns the keys
    dropped."""
    config, state_dict, dropped = convert_official(
        mapping.load_original(source),
        source,
        tasks,
        num_attention_heads=num_attention_heads,
        rgb_range=rgb_range,
        file_name=os.path.basename(source),
    )
    processor = hf_xcv.IPTImageProcessor(rgb_range=config["rgb_range"])
    write_converted(config, state_dict, processor, output, mapping.TARGET_MODEL_TYPE, source, overwrite)
    return dropped


def compare_with_original(
    model: hf_xcv.IPTForImageRestoration, original: dict[str, torch.Tensor], batch: int = 1, seed: int = 0
) -> dict[str, float]:
    """Largest |difference| between ``model`` and the official forward pass on ``original`` (official names) for
    every task, on random one-tile images in [0, rgb_range] of the model's dtype: ``<task>`` the restoration,
    ``<task> features`` the body's per-patch output."""
    config = model.config
    original = dict(original)
    rows = original[mapping.POSITIONS].shape[0]
    original.setdefault(mapping.POSITION_IDS, torch.arange(rows).view(1, rows))  # a file without the buffer
    dtype = next(model.parameters()).dtype
    deltas = {}
    for index, task in enumerate(config.tasks):
        x = random_input(batch, config.image_size, config.rgb_range, seed=seed + index, dtype=dtype)
        with torch.no_grad():
            ours = model(x, task=task, output_patch_features=True)
            theirs, features = official_forward(original, x, index, num_heads=config.num_attention_heads, con=True)
        deltas[task] = (ours.reconstruction - theirs).abs().max().item()
        deltas[f"{task} features"] = (ours.patch_features - features).abs().max().item()
    return deltas


def verify(source: str, converted: str, tolerance: float, revision: str | None = None) -> float:
    """Largest |difference| between the converted model and the functional reference on the source's weights, over
    every task's restoration and body features, in float64; a ValueError above ``tolerance``."""
    original = mapping.strip_data_parallel(mapping.load_original(source))
    model = hf_xcv.IPTForImageRestoration.from_pretrained(converted).double().eval()
    deltas = compare_with_original(model, original)
    shown = ", ".join(
        f"{task} {deltas[task]:.2e} (features {deltas[task + ' features']:.2e})" for task in model.config.tasks
    )
    print(f"max |delta| vs the official forward pass (float64, 0-{model.config.rgb_range:g} scale): {shown}")
    return check_deltas(deltas, tolerance)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks",
        default=None,
        help="the tasks in the checkpoint's order, comma-separated (sr_x2, sr_x3, sr_x4, denoise_<sigma>, derain or "
        "names of your own); default: read from the tails' scales and the file name (see above)",
    )
    parser.add_argument(
        "--num_attention_heads",
        type=int,
        default=mapping.DEFAULT_NUM_HEADS,
        help=f"attention heads (not recorded in the weights; {mapping.DEFAULT_NUM_HEADS} in the official scripts)",
    )
    parser.add_argument(
        "--rgb_range",
        type=float,
        default=None,
        help="the value range the model was trained on (255 in the official scripts); default: read from the "
        "MeanShifts, which must agree when it is given",
    )


def _convert(args: argparse.Namespace) -> list[str]:
    tasks = [name.strip() for name in args.tasks.split(",")] if args.tasks else None
    return convert_file(args.input, args.output, args.overwrite, tasks, args.num_attention_heads, args.rgb_range)


def main(argv: list[str] | None = None) -> None:
    source = "official IPT (IPT_sr2.pt, ..., IPT_pretrain.pt)"
    run(argv, __doc__, mapping.TARGET_MODEL_TYPE, verify, source, _add_arguments, _convert, input_kinds="a .pt file")


if __name__ == "__main__":
    main(sys.argv[1:])
