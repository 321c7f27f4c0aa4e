"""The image-classification training recipes of the papers, as presets of ``hf-xcv-train image-classification
--recipe NAME`` (each value overridable by its own option) and for transformers' Trainer.

The values are the published ones (docs/training.md has them beside the paper tables):

* ``deit``: DeiT (Touvron et al. 2021, Table 9; the DeiT repository's ``main.py`` defaults): AdamW, learning rate
  5e-4 per 512 images of batch, weight decay 0.05, cosine schedule with 5 warm-up epochs of 300, label smoothing
  0.1, RandAugment ``rand-m9-mstd0.5-inc1``, random resized crop and flip, random erasing 0.25 (per-pixel normal),
  Mixup 0.8 and CutMix 1.0 (probability 1, switch probability 0.5), stochastic depth 0.1, no gradient clipping, an
  EMA of the weights with decay 0.99996.
* ``swin``: Swin (Liu et al. 2021, appendix A2.1): AdamW, learning rate 1e-3 per 1024 images, weight decay 0.05,
  cosine schedule with 20 warm-up epochs of 300, DeiT's augmentation and regularisation, stochastic depth 0.2
  (Swin-T), no EMA ("it does not enhance performance"); gradient clipping at norm 5 is the Swin repository's
  configuration (``TRAIN.CLIP_GRAD``), not the paper's text.
* ``finetune``: fine-tuning a pretrained ViT / Swin as BEiT (Bao et al. 2022) and MAE (He et al. 2022, Table 9) do:
  AdamW, learning rate 5e-4 per 256 images, weight decay 0.05, cosine with 5 warm-up epochs of 100, layer-wise
  learning-rate decay 0.75, label smoothing 0.1, RandAugment ``rand-m9-mstd0.5-inc1``, random erasing 0.25,
  Mixup 0.8 / CutMix 1.0, stochastic depth 0.1; and an EMA of the weights (timm's default decay 0.9998), which
  MAE's table does not use but timm's fine-tuning does.

DeiT's repeated augmentation is not among the options. The EMA decays are the published ones, made for hundreds of
thousands of steps: a short run should add ``--model_ema_warmup true`` (timm's warm-up), or its EMA weights stay
near the initial ones. Warm-up is given as the fraction of the run the paper spends in it (5 of 300 epochs),
since a run here may be of any length; the learning rate is scaled linearly with the total batch (per-device batch
x processes x accumulation), as the papers do.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..utils.errors import UsageError


@dataclass(frozen=True)
class ClassificationRecipe:
    """One paper's image-classification recipe (the options of the training script it sets)."""

    name: str
    source: str
    base_learning_rate: float  # at reference_batch images per optimizer step
    reference_batch: int
    weight_decay: float
    warmup_ratio: float
    lr_scheduler_type: str
    label_smoothing: float
    rand_augment: str | None  # timm's RandAugment config string, None: off
    crop_scale_min: float  # random resized crop: the smallest share of the image area
    hflip: float
    random_erasing: float
    mixup_alpha: float
    cutmix_alpha: float
    mix_prob: float
    mix_switch_prob: float
    drop_path_rate: float
    max_grad_norm: float  # 0: no clipping
    layer_decay: float | None
    model_ema: bool
    model_ema_decay: float

    def learning_rate(self, total_batch: int) -> float:
        """The learning rate at ``total_batch`` images per optimizer step (the linear scaling rule)."""
        return self.base_learning_rate * total_batch / self.reference_batch

    def options(self, total_batch: int) -> dict[str, object]:
        """The script options this recipe sets, by option name, at ``total_batch``."""
        values = asdict(self)
        for key in ("name", "source", "base_learning_rate", "reference_batch"):
            values.pop(key)
        return values | {"learning_rate": self.learning_rate(total_batch)}


_DEIT_AUGMENTATION = dict(
    label_smoothing=0.1, rand_augment="rand-m9-mstd0.5-inc1", crop_scale_min=0.08, hflip=0.5, random_erasing=0.25,
    mixup_alpha=0.8, cutmix_alpha=1.0, mix_prob=1.0, mix_switch_prob=0.5, lr_scheduler_type="cosine",
    weight_decay=0.05,
)  # fmt: skip

RECIPES: dict[str, ClassificationRecipe] = {
    "deit": ClassificationRecipe(
        name="deit", source="Touvron et al. 2021, Training data-efficient image transformers (Table 9)",
        base_learning_rate=5e-4, reference_batch=512, warmup_ratio=5 / 300, drop_path_rate=0.1, max_grad_norm=0.0,
        layer_decay=None, model_ema=True, model_ema_decay=0.99996, **_DEIT_AUGMENTATION,
    ),
    "swin": ClassificationRecipe(
        name="swin", source="Liu et al. 2021, Swin Transformer (appendix A2.1)",
        base_learning_rate=1e-3, reference_batch=1024, warmup_ratio=20 / 300, drop_path_rate=0.2, max_grad_norm=5.0,
        layer_decay=None, model_ema=False, model_ema_decay=0.9998, **_DEIT_AUGMENTATION,
    ),
    "finetune": ClassificationRecipe(
        name="finetune", source="Bao et al. 2022 (BEiT) and He et al. 2022 (MAE, Table 9) fine-tuning",
        base_learning_rate=5e-4, reference_batch=256, warmup_ratio=5 / 100, drop_path_rate=0.1, max_grad_norm=0.0,
        layer_decay=0.75, model_ema=True, model_ema_decay=0.9998, **_DEIT_AUGMENTATION,
    ),
}  # fmt: skip


def get_recipe(name: str) -> ClassificationRecipe:
    """The recipe called ``name``; a UsageError naming the known ones otherwise."""
    if name not in RECIPES:
        raise UsageError(f"unknown recipe {name!r}; choose one of {sorted(RECIPES)}")
    return RECIPES[name]
