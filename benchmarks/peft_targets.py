"""What peft's LoRA adapts by default in each family's full-size preset (hf_xcv's registered targets).

    python benchmarks/peft_targets.py [--rank 8]

Counts, on the meta device (no weights are made), the modules the default ``LoraConfig`` targets, the share of the
model's weights they hold, and the share of trainable parameters LoRA of ``--rank`` adds; peft's choice for Bart
(``q_proj``, ``v_proj``), what hf_xcv registered before, is printed beside it.
"""

from __future__ import annotations

import argparse
import warnings

import results_file
import torch
from torch import nn

PRESETS = {
    "ViT": ("xcv_vit", "vit-base-patch16-224"),
    "Swin": ("xcv_swin", "swin-tiny-patch4-window7-224"),
    "DETR": ("xcv_detr", "detr-resnet-50"),
    "Deformable DETR": ("xcv_deformable_detr", "deformable-detr"),
    "Transformer": ("xcv_transformer", "transformer-base"),
    "IPT": ("xcv_ipt", "ipt-sr-x2"),
    "TTSR": ("xcv_ttsr", "ttsr"),
    "X-former": ("xcv_xformer", "xformer-lra-text"),
}
BART_DEFAULT = ("q_proj", "v_proj")


def lora_parameters(module: nn.Module, rank: int) -> int:
    """The parameters LoRA of ``rank`` adds to one linear or convolution layer (its A and B matrices)."""
    if isinstance(module, nn.Linear):
        return rank * (module.in_features + module.out_features)
    return rank * module.in_channels * module.kernel_size[0] * module.kernel_size[1] + rank * module.out_channels


def count(model: nn.Module, names: set[str], rank: int, total: int) -> tuple[int, float, float]:
    modules = [
        module
        for name, module in model.named_modules()
        if name.rsplit(".", 1)[-1] in names and isinstance(module, (nn.Linear, nn.Conv2d))
    ]
    held = sum(parameter.numel() for module in modules for parameter in module.parameters())
    added = sum(lora_parameters(module, rank) for module in modules)
    return len(modules), 100 * held / total, 100 * added / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument(
        "--results", default=str(results_file.RESULTS / "peft_targets.md"), help="where the table goes ('' for none)"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as LORA_TARGETS

    from hf_xcv import MODEL_TYPES, preset_config

    with results_file.tee() as printed:
        print(f"LoRA (r={args.rank}) with the default target modules, on each family's full-size preset:")
        print("")
        print("| family (preset) | parameters | default targets | modules | weights they hold | LoRA adds | "
              "q_proj, v_proj only: modules | LoRA adds |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        for family, (model_type, preset) in PRESETS.items():
            entry = MODEL_TYPES[model_type]
            head = next(iter(entry.heads.values()))
            with torch.device("meta"):
                model = head(preset_config(preset))
            total = sum(parameter.numel() for parameter in model.parameters())
            targets = list(LORA_TARGETS[model_type])
            present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
            shown = ", ".join(f"`{name}`" for name in targets if name in present)
            new = count(model, set(targets), args.rank, total)
            old = count(model, {entry.adapter_module_names.get(n, n) for n in BART_DEFAULT}, args.rank, total)
            print(
                f"| {family} (`{preset}`) | {total / 1e6:.1f} M | {shown} | {new[0]} | {new[1]:.1f} % | {new[2]:.2f} % "
                f"| {old[0]} | {old[2]:.2f} % |"
            )
    results_file.write(args.results, printed)


if __name__ == "__main__":
    main()
