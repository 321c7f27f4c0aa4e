"""IPT configuration (Chen et al. 2021, "Pre-Trained Image Processing Transformer")."""

from __future__ import annotations

import math
from typing import Any

from ...configuration_utils import XcvConfig, check_attention, check_attention_serves
from ...processing.restoration import RestorationTask, parse_task
from ...utils.checks import check_bool, check_int, check_positive_float, check_probability
from ...utils.errors import UsageError

# What IPT's encoder asks of a registry core: its tokens are the 3x3 patches of a square feature map (a 2-D grid),
# never padded (every tile is whole).
IPT_ATTENTION_REQUESTS = {"grid_available": True}
DIV2K_MEAN = (0.4488, 0.4371, 0.4040)  # the official MeanShift's RGB mean (std 1)


class IPTConfig(XcvConfig):
    r"""Configuration of IPT. Defaults are the paper's single-task x2 model (115.5M parameters; the 6-task
    pre-training layout, ``tasks=["sr_x2", "sr_x3", "sr_x4", "denoise_30", "denoise_50", "derain"]``, has 118.9M).

    The network is one shared transformer body between a head and a tail per task: a task's head (a 3x3 convolution
    and two residual blocks of 5x5 convolutions) maps the image to ``n_feats`` channels; the body cuts that
    ``image_size`` x ``image_size`` feature map into ``patch_size`` x ``patch_size`` patches (16 x 16 = 256 tokens of
    64 * 3 * 3 = 576 numbers at the defaults), runs a pre-norm encoder and a decoder whose queries carry the task's
    learned embedding, and folds the tokens back; the task's tail upsamples (sub-pixel convolutions) and maps back to
    RGB. The body takes exactly ``image_size`` x ``image_size`` inputs: larger images are processed in overlapping
    tiles (``tile_overlap``) and blended (:class:`IPTForImageRestoration`).

    Args:
        tasks: the tasks, one head, tail and query embedding each, in this order: ``sr_x2``, ``sr_x3``, ``sr_x4``
            (bicubic super-resolution), ``denoise_<sigma>``, ``derain``, or names of your own (lower case, digits,
            underscores) whose scale ``task_scales`` sets (1 by default).
        task_scales: output scales of user-named tasks (``{"deblur": 1, "my_sr": 2}``); built-in names carry theirs.
        num_channels: channels of the images (RGB).
        n_feats: channels of the heads, tails and of the feature map the body folds into patches.
        image_size: side of the square feature map (= input tile, in input pixels) the body takes (the official
            ``patch_size``, 48).
        patch_size: side of the square patches that are the body's tokens (the official ``patch_dim``, 3); the token
            width (``hidden_size``) is ``n_feats * patch_size**2``.
        num_hidden_layers: layers of the encoder, and of the decoder.
        num_attention_heads: heads of every attention.
        intermediate_size: width of the feed-forward blocks and of the body's output MLP; ``None``: 4 x hidden_size.
        hidden_dropout: dropout after the patch embedding, in the feed-forward blocks and residual branches.
        attention_dropout: dropout on the attention probabilities.
        layer_norm_eps: epsilon of the LayerNorms.
        head_kernel_size: kernel of the heads' residual blocks (5).
        num_head_blocks: residual blocks of each head (2).
        rgb_range: the value range of the images (0 .. rgb_range): 255 as the official code, whose checkpoints'
            mean shift is in those units; the image processor makes pixel values in this range.
        image_mean: the mean the model subtracts first and adds back last (the official MeanShift: DIV2K's RGB mean
            times ``rgb_range``, std 1).
        tile_overlap: overlap of neighbouring tiles, in input pixels, when an image larger than ``image_size`` is
            processed in tiles; the outputs are blended with weights that fall linearly over the overlap. ``None``: a
            quarter of a tile (12 at the default 48).
        tile_batch_size: how many tiles go through the network at once (bounds the memory of tiled inference).
        attention_output_bias: a bias on the attentions' output projections (none in the paper's model, as
            ``nn.MultiheadAttention(bias=False)``; some PyTorch 1.x versions saved one anyway, which conversion
            keeps).
        attention_type / attention_kwargs: the registry core of the encoder's self-attention (``"full"``: softmax
            attention, the paper). The decoder's attentions stay full (their queries carry the task embedding).
        contrastive_loss_weight: weight of the supervised contrastive loss on the body's per-patch features (patches
            of one image are positives) that ``labels`` add to the L1 loss (0: L1 only; the paper pre-trains with 0.1).
        contrastive_temperature: its temperature (0.07, the paper's).
    """

    model_type = "xcv_ipt"
    attribute_map = {"dropout": "hidden_dropout"}

    tasks: list[str] | tuple[str, ...] = ("sr_x2",)
    task_scales: dict[str, int] | None = None
    num_channels: int = 3
    n_feats: int = 64
    image_size: int = 48
    patch_size: int = 3
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int | None = None
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    layer_norm_eps: float = 1e-5
    head_kernel_size: int = 5
    num_head_blocks: int = 2
    rgb_range: float | int = 255
    image_mean: list[float] | tuple[float, ...] = DIV2K_MEAN
    tile_overlap: int | None = None
    tile_batch_size: int = 64
    attention_output_bias: bool = False
    attention_type: str = "full"
    attention_kwargs: dict[str, Any] | None = None
    contrastive_loss_weight: float | int = 0.0
    contrastive_temperature: float = 0.07

    def __post_init__(self, **kwargs: Any) -> None:
        if self.attention_kwargs is None:
            self.attention_kwargs = {}
        if self.task_scales is None:
            self.task_scales = {}
        for name in ("tasks", "image_mean"):
            if isinstance(getattr(self, name), tuple):
                setattr(self, name, list(getattr(self, name)))
        if self.tile_overlap is None and isinstance(self.image_size, int):
            self.tile_overlap = self.image_size // 4
        if self.intermediate_size is None and isinstance(self.hidden_size, int):
            self.intermediate_size = 4 * self.hidden_size
        super().__post_init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        """Width of the body's tokens: the ``patch_size`` x ``patch_size`` patches of the ``n_feats`` feature map."""
        if isinstance(self.n_feats, int) and isinstance(self.patch_size, int):
            return self.n_feats * self.patch_size**2
        return 0

    @hidden_size.setter
    def hidden_size(self, value: Any) -> None:
        if value != self.hidden_size:
            raise UsageError(
                f"hidden_size is n_feats * patch_size**2 = {self.hidden_size} (the flattened patches, which the body "
                f"adds to their embedding), not a setting; got {value!r}"
            )

    @property
    def num_patches(self) -> int:
        """Tokens of the body: (image_size / patch_size)**2."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def restoration_tasks(self) -> list[RestorationTask]:
        """The tasks, parsed (kind, scale, noise level), in order."""
        return [parse_task(name, self.task_scales.get(name)) for name in self.tasks]

    def task_index(self, task: str | None) -> int:
        """Index of ``task`` (None: the only task); ValueError naming the known tasks otherwise."""
        if task is None:
            if len(self.tasks) == 1:
                return 0
            raise UsageError(f"this IPT holds {len(self.tasks)} tasks: choose one with task=, one of {self.tasks}")
        if task not in self.tasks:
            raise UsageError(f"unknown task {task!r}; this IPT was built for {self.tasks}")
        return self.tasks.index(task)

    def check(self) -> None:
        tasks = self.tasks
        if not isinstance(tasks, (list, tuple)) or not tasks:
            raise UsageError(f"tasks must be a non-empty list of task names, got {tasks!r}")
        if len(set(tasks)) != len(tasks):
            raise UsageError(f"tasks must be distinct, got {tasks!r}")
        if not isinstance(self.task_scales, dict):
            raise UsageError(f"task_scales must map task names to scales, got {self.task_scales!r}")
        strangers = sorted(set(self.task_scales) - set(tasks))
        if strangers:
            raise UsageError(f"task_scales names {strangers}, which are not in tasks {list(tasks)}")
        self.restoration_tasks  # noqa: B018  (parses every name: ValueError for a bad one)
        if self.num_channels != 3:
            raise UsageError(f"num_channels={self.num_channels!r} is not allowed: IPT takes RGB images (3)")
        for name in ("n_feats", "image_size", "patch_size", "num_hidden_layers", "num_attention_heads",
                     "head_kernel_size", "tile_batch_size"):  # fmt: skip
            check_int(name, getattr(self, name))
        check_int("num_head_blocks", self.num_head_blocks, 0)
        check_int("intermediate_size", self.intermediate_size)
        if self.image_size % self.patch_size:
            raise UsageError(
                f"image_size={self.image_size} must be a multiple of patch_size={self.patch_size} (the body cuts the "
                "feature map into whole patches)"
            )
        if self.hidden_size % self.num_attention_heads:
            raise UsageError(
                f"hidden_size = n_feats * patch_size**2 = {self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_kernel_size % 2 == 0:
            raise UsageError(f"head_kernel_size must be odd (same-size convolutions), got {self.head_kernel_size}")
        check_int("tile_overlap", self.tile_overlap, 0)
        if self.tile_overlap >= self.image_size:
            raise UsageError(
                f"tile_overlap={self.tile_overlap} must be smaller than a tile (image_size={self.image_size})"
            )
        check_bool("attention_output_bias", self.attention_output_bias)
        check_probability("hidden_dropout", self.hidden_dropout)
        check_probability("attention_dropout", self.attention_dropout)
        check_positive_float("layer_norm_eps", self.layer_norm_eps)
        check_positive_float("rgb_range", self.rgb_range)
        mean = self.image_mean
        numbers = isinstance(mean, (list, tuple)) and all(
            isinstance(m, (int, float)) and math.isfinite(m) for m in mean
        )
        if not numbers or len(mean) != 3:
            raise UsageError(f"image_mean must be three numbers (RGB, as fractions of rgb_range), got {mean!r}")
        weight = self.contrastive_loss_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise UsageError(f"contrastive_loss_weight must be a number >= 0, got {weight!r}")
        check_positive_float("contrastive_temperature", self.contrastive_temperature)
        heads = self.num_attention_heads
        check_attention(self.attention_type, self.attention_kwargs, self.attention_dropout, heads, self.hidden_size)
        check_attention_serves(self.attention_type, IPT_ATTENTION_REQUESTS, "IPT's encoder")
