"""TTSR's losses beyond the L1 reconstruction (Yang et al. 2020, section 3.4), as the original code computes them.

* Perceptual: the mean squared error of VGG19's relu5_1 features of SR and HR (:func:`perceptual_loss`), the VGG
  frozen (:func:`hf_xcv.conversion.vgg.load_perceptual_vgg`), the HR side without gradient.
* Transferal perceptual: the mean over the three texture levels of the mean squared error between the texture
  extractor's features of SR (read with detached weights: the original's ``LTE_copy``) and the transferred
  textures T (:func:`transferal_perceptual_loss`). The paper writes it with Gram matrices of S-weighted features;
  the released code and ``train.sh`` use neither (its ``gram_matrix`` is never called, ``tpl_use_S`` is off), and
  that is the default here; the S-weighting and an L1 form are the code's options (``soft_attention``,
  ``kind="l1"``). Gradients reach SR through the frozen extractor and the extractor itself only through T, which
  is not detached: the loss pulls SR's textures towards T and T towards SR's (TTSR issue #4).
* Adversarial: WGAN-GP with the original's discriminator (:class:`TTSRDiscriminator`), stepped ``gan_k`` times
  with its own Adam before each generator step (:class:`TTSRAdversarialLoss`); the generator's loss is -D(SR).
* Weights: ``train.sh``'s (:data:`TTSR_LOSS_WEIGHTS`); :class:`TTSRCriterion` sums the weighted terms.

Images are in [-1, 1] throughout (the model's range).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..layers.vgg import find_texture_extractor
from .reconstruction import reconstruction_loss

TEXTURE_LOSS_KINDS = ("l1", "l2")
DISCRIMINATOR_WIDTHS = (32, 64, 128, 256, 512)  # each: a 3x3 convolution, then a stride-2 one (the original's ten)
DISCRIMINATOR_HIDDEN = 1024
LEAKY_SLOPE = 0.2


@dataclass(frozen=True)
class TTSRLossWeights:
    """Weights of TTSR's four losses; the defaults are the original ``train.sh``'s (``rec_w``, ``per_w``, ``tpl_w``,
    ``adv_w``). A zero weight switches its loss off (it is then not computed)."""

    reconstruction: float = 1.0
    perceptual: float = 1e-2
    transferal_perceptual: float = 1e-2
    adversarial: float = 1e-3

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value >= 0:
                raise ValueError(f"loss weight {name} must be a non-negative number, got {value!r}")


TTSR_LOSS_WEIGHTS = TTSRLossWeights()  # TTSR: all losses
TTSR_REC_LOSS_WEIGHTS = TTSRLossWeights(perceptual=0.0, transferal_perceptual=0.0, adversarial=0.0)  # TTSR-rec


def perceptual_loss(vgg: nn.Module, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of ``vgg``'s features (VGG19 up to relu5_1 on [-1, 1] images, frozen) of the prediction
    and of the target; the target's are computed without gradient."""
    if prediction.shape != target.shape:
        raise ValueError(f"prediction {tuple(prediction.shape)} and target {tuple(target.shape)} differ in shape")
    predicted = vgg(prediction)
    with torch.no_grad():
        expected = vgg(target.detach())
    return F.mse_loss(predicted.float(), expected.float())


def soft_attention_weights(soft_attention: torch.Tensor, num_levels: int = 3) -> list[torch.Tensor]:
    """sigmoid(S) at each texture level, coarsest first: S (B, 1, h, w) bicubically upsampled x1, x2, x4 (the
    original upsamples S, then takes the sigmoid)."""
    height, width = soft_attention.shape[-2:]
    weights = []
    for level in range(num_levels):
        scaled = soft_attention
        if level:
            size = (height * 2**level, width * 2**level)
            scaled = F.interpolate(soft_attention, size=size, mode="bicubic")
        weights.append(torch.sigmoid(scaled))
    return weights


def texture_loss(
    features: Sequence[torch.Tensor],
    textures: Sequence[torch.Tensor],
    soft_attention: torch.Tensor | None = None,
    kind: str = "l2",
) -> torch.Tensor:
    """Mean over the levels of the mean squared (``"l2"``) or absolute (``"l1"``) error between ``features`` and
    ``textures``, both ordered coarsest first as the model's ``transferred_textures`` ((B, C3, h, w), (B, C2, 2h,
    2w), (B, C1, 4h, 4w)); with ``soft_attention`` (B, 1, h, w), both sides are multiplied by its sigmoid at each
    level (:func:`soft_attention_weights`) first. In float32."""
    if kind not in TEXTURE_LOSS_KINDS:
        raise ValueError(f"kind={kind!r} is not allowed; allowed values: {list(TEXTURE_LOSS_KINDS)}")
    if len(features) != len(textures):
        raise ValueError(f"{len(features)} feature levels against {len(textures)} texture levels")
    for level, (feature, texture) in enumerate(zip(features, textures)):
        if feature.shape != texture.shape:
            raise ValueError(f"level {level}: features {tuple(feature.shape)} but textures {tuple(texture.shape)}")
    if soft_attention is None:
        weights = [1.0] * len(features)
    elif soft_attention.shape[-2:] != features[0].shape[-2:]:
        raise ValueError(
            f"soft attention {tuple(soft_attention.shape)} is not at the coarsest level's {tuple(features[0].shape)}"
        )
    else:
        weights = soft_attention_weights(soft_attention.float(), len(features))
    error = F.l1_loss if kind == "l1" else F.mse_loss
    losses = [error(f.float() * w, t.float() * w) for f, t, w in zip(features, textures, weights)]
    return sum(losses) / len(losses)


def transferal_perceptual_loss(
    texture_extractor: nn.Module,
    reconstruction: torch.Tensor,
    transferred_textures: Sequence[torch.Tensor],
    soft_attention: torch.Tensor | None = None,
    kind: str = "l2",
) -> torch.Tensor:
    """TTSR's transferal perceptual loss: :func:`texture_loss` between the extractor's features of the
    reconstruction, read with detached weights (``texture_extractor.frozen``), and the model's
    ``transferred_textures`` (T3, T2, T1). Without ``soft_attention`` (the original's default), the plain mean of
    the three levels' MSE."""
    lv1, lv2, lv3 = texture_extractor.frozen(reconstruction)  # gradients reach SR, not the extractor
    return texture_loss((lv3, lv2, lv1), transferred_textures, soft_attention, kind)


def discriminator_feature_side(in_size: int, num_strided: int = len(DISCRIMINATOR_WIDTHS)) -> int:
    """The side of the discriminator's last feature map: each stride-2 3x3 convolution (padding 1) halves it,
    rounding up (``in_size / 32`` for multiples of 32, as the original assumes)."""
    for _ in range(num_strided):
        in_size = (in_size + 1) // 2
    return in_size


class TTSRDiscriminator(nn.Module):
    """The original WGAN critic: ten 3x3 convolutions (32, 32/2, 64, 64/2, 128, 128/2, 256, 256/2, 512, 512/2
    channels; /2: stride 2), each followed by LeakyReLU(0.2), then a fully connected layer to 1024 (LeakyReLU) and
    one to a score. The first fully connected layer fixes the input: ``in_size`` x ``in_size`` images (160, the
    original's HR crops), (B, 3, in_size, in_size) -> (B, 1). ``widths`` and ``hidden_size`` change the widths
    (the same structure; tests use narrow ones)."""

    def __init__(
        self,
        in_size: int = 160,
        num_channels: int = 3,
        widths: Sequence[int] = DISCRIMINATOR_WIDTHS,
        hidden_size: int = DISCRIMINATOR_HIDDEN,
    ):
        super().__init__()
        if not isinstance(in_size, int) or in_size < 1:
            raise ValueError(f"in_size must be a positive integer (the side of the images it scores), got {in_size!r}")
        self.in_size = in_size
        layers: list[nn.Module] = []
        channels = num_channels
        for width in widths:
            for stride in (1, 2):
                layers += [nn.Conv2d(channels, width, 3, stride=stride, padding=1), nn.LeakyReLU(LEAKY_SLOPE)]
                channels = width
        self.features = nn.Sequential(*layers)
        side = discriminator_feature_side(in_size, len(widths))
        self.fc1 = nn.Linear(channels * side * side, hidden_size)
        self.fc2 = nn.Linear(hidden_size, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.ndim != 4 or tuple(images.shape[-2:]) != (self.in_size, self.in_size):
            raise ValueError(
                f"the discriminator scores (B, C, {self.in_size}, {self.in_size}) images (its fully connected layer "
                f"fixes the size: in_size={self.in_size}), got {tuple(images.shape)}; crop to {self.in_size} or build "
                "TTSRDiscriminator(in_size=...) for the training crops' side"
            )
        x = self.features(images).flatten(1)  # (B, widths[-1] * side * side)
        return self.fc2(F.leaky_relu(self.fc1(x), LEAKY_SLOPE))  # (B, 1)


def gradient_penalty(
    discriminator: nn.Module,
    real: torch.Tensor,
    fake: torch.Tensor,
    weight: float = 10.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """WGAN-GP's penalty: ``weight * mean((|grad D(x)| - 1)^2)`` at random interpolates ``x = fake * (1 - e) + real
    * e``, one ``e ~ U[0, 1)`` per image (drawn from ``generator``, on its device, when given). The graph is kept so
    that the penalty trains the discriminator."""
    fake, real = fake.detach(), real.detach()
    device = generator.device if generator is not None else real.device
    epsilon = torch.rand(real.shape[0], 1, 1, 1, generator=generator, device=device).to(real)  # (B, 1, 1, 1)
    mixed = (fake * (1 - epsilon) + real * epsilon).requires_grad_(True)
    (gradients,) = torch.autograd.grad(discriminator(mixed).sum(), mixed, create_graph=True)
    norms = gradients.flatten(1).norm(2, dim=1)  # (B,)
    return weight * (norms - 1).square().mean()


def wgan_discriminator_loss(
    discriminator: nn.Module,
    real: torch.Tensor,
    fake: torch.Tensor,
    penalty_weight: float = 10.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The critic's WGAN-GP loss: ``mean(D(fake)) - mean(D(real))`` plus :func:`gradient_penalty`; ``fake`` is
    detached (the generator is not trained by it)."""
    fake = fake.detach()
    loss = (discriminator(fake) - discriminator(real)).mean()
    return loss + gradient_penalty(discriminator, real, fake, penalty_weight, generator)


def wgan_generator_loss(discriminator: nn.Module, fake: torch.Tensor) -> torch.Tensor:
    """The generator's WGAN loss, ``-mean(D(fake))``."""
    return -discriminator(fake).mean()


def build_discriminator_optimizer(discriminator: nn.Module, lr: float = 1e-4) -> torch.optim.Adam:
    """The original's optimizer of the discriminator: Adam, betas (0, 0.9), eps 1e-8 (``lr_rate_dis`` 1e-4)."""
    return torch.optim.Adam(discriminator.parameters(), lr=lr, betas=(0.0, 0.9), eps=1e-8)


class TTSRAdversarialLoss:
    """TTSR's WGAN-GP: before each generator step, ``gan_k`` updates of the discriminator with its own optimizer on
    the detached SR (fake) and the HR (real), then the generator's loss -D(SR).

    Args:
        discriminator: the critic (:class:`TTSRDiscriminator`, possibly wrapped by accelerate).
        optimizer: its optimizer; :func:`build_discriminator_optimizer` when None.
        gan_k: discriminator updates per generator step (the original's ``GAN_k``, 2).
        penalty_weight: the gradient penalty's weight (10).
        generator: the source of the interpolation weights; None uses torch's global generator, as the original.

    Its :meth:`state_dict` (the discriminator, its optimizer and the generator's state) restores an exact resume.
    """

    def __init__(
        self,
        discriminator: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        gan_k: int = 2,
        penalty_weight: float = 10.0,
        generator: torch.Generator | None = None,
    ):
        if not isinstance(gan_k, int) or gan_k < 1:
            raise ValueError(f"gan_k (discriminator updates per generator step) must be a positive integer: {gan_k!r}")
        self.discriminator = discriminator
        self.optimizer = optimizer if optimizer is not None else build_discriminator_optimizer(discriminator)
        self.gan_k = gan_k
        self.penalty_weight = penalty_weight
        self.generator = generator

    def discriminator_step(self, fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """``gan_k`` optimizer steps of the discriminator on the detached ``fake``; returns the last loss (detached).
        Nothing reaches the generator."""
        fake, real = fake.detach(), real.detach()
        for _ in range(self.gan_k):
            self.optimizer.zero_grad()
            loss = wgan_discriminator_loss(self.discriminator, real, fake, self.penalty_weight, self.generator)
            loss.backward()
            self.optimizer.step()
        return loss.detach()

    def generator_loss(self, fake: torch.Tensor) -> torch.Tensor:
        """-D(fake), differentiable with respect to ``fake``. Its backward also leaves gradients in the
        discriminator's parameters (as the original's); the next :meth:`discriminator_step` clears them first."""
        return wgan_generator_loss(self.discriminator, fake)

    def __call__(self, fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """The original's ``AdversarialLoss.forward``: the discriminator's steps, then the generator's loss."""
        self.discriminator_step(fake, real)
        return self.generator_loss(fake)

    def to(self, device: torch.device | str) -> TTSRAdversarialLoss:
        """Move the discriminator (before its first step: the optimizer's state is created where it is then)."""
        self.discriminator.to(device)
        return self

    def state_dict(self) -> dict[str, Any]:
        state = {"discriminator": self.discriminator.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.generator is not None:
            state["generator"] = self.generator.get_state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.discriminator.load_state_dict(state["discriminator"])
        self.optimizer.load_state_dict(state["optimizer"])
        if "generator" in state:
            if self.generator is None:
                self.generator = torch.Generator()
            self.generator.set_state(state["generator"])


class TTSRCriterion:
    """TTSR's training objective: the weighted sum of the reconstruction (L1), perceptual, transferal perceptual
    and adversarial losses, the original trainer's order and weights.

    Args:
        vgg: the frozen perceptual network (:func:`hf_xcv.conversion.vgg.load_perceptual_vgg`); needed when
            ``weights.perceptual`` > 0.
        adversarial: the WGAN-GP (:class:`TTSRAdversarialLoss`); needed when ``weights.adversarial`` > 0. Calling
            the criterion steps its discriminator.
        weights: the four weights (``train.sh``'s by default; :data:`TTSR_REC_LOSS_WEIGHTS` for TTSR-rec).
        texture_kind: ``"l2"`` (the original's) or ``"l1"`` for the transferal perceptual loss.
        texture_soft_attention: weight the transferal perceptual loss by sigmoid(S) (the original's ``tpl_use_S``,
            off by default).
    """

    def __init__(
        self,
        vgg: nn.Module | None = None,
        adversarial: TTSRAdversarialLoss | None = None,
        weights: TTSRLossWeights = TTSR_LOSS_WEIGHTS,
        texture_kind: str = "l2",
        texture_soft_attention: bool = False,
    ):
        if weights.perceptual > 0 and vgg is None:
            raise ValueError(
                "weights.perceptual > 0 needs the frozen VGG19 (hf_xcv.conversion.vgg.load_perceptual_vgg)"
            )
        if vgg is not None and any(p.requires_grad for p in vgg.parameters()):
            raise ValueError("the perceptual loss's VGG must be frozen (requires_grad False): load_perceptual_vgg")
        if weights.adversarial > 0 and adversarial is None:
            raise ValueError("weights.adversarial > 0 needs the discriminator: pass a TTSRAdversarialLoss")
        if texture_kind not in TEXTURE_LOSS_KINDS:
            raise ValueError(
                f"texture_kind={texture_kind!r} is not allowed; allowed values: {list(TEXTURE_LOSS_KINDS)}"
            )
        self.vgg, self.adversarial, self.weights = vgg, adversarial, weights
        self.texture_kind, self.texture_soft_attention = texture_kind, texture_soft_attention

    def __call__(
        self, model: nn.Module, outputs: Any, labels: torch.Tensor, reconstruction_only: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The total loss of one generator step, and each weighted term detached (plus the discriminator's last
        loss) for logging.

        Args:
            model: the TTSR model that made ``outputs`` (its texture extractor gives the transferal loss).
            outputs: its output (``reconstruction``, ``soft_attention``, ``transferred_textures``).
            labels: (B, 3, 4h, 4w) the HR images in [-1, 1].
            reconstruction_only: the original's first epochs (``num_init_epochs``): the reconstruction loss alone.
        """
        sr, weights = outputs.reconstruction, self.weights
        terms = {"reconstruction": weights.reconstruction * reconstruction_loss(sr, labels)}
        logs = {}
        if not reconstruction_only and weights.perceptual > 0:
            terms["perceptual"] = weights.perceptual * perceptual_loss(self.vgg, sr, labels)
        if not reconstruction_only and weights.transferal_perceptual > 0:
            soft = outputs.soft_attention if self.texture_soft_attention else None
            loss = transferal_perceptual_loss(
                find_texture_extractor(model), sr, outputs.transferred_textures, soft, self.texture_kind
            )
            terms["transferal_perceptual"] = weights.transferal_perceptual * loss
        if not reconstruction_only and weights.adversarial > 0:
            logs["discriminator"] = self.adversarial.discriminator_step(sr, labels)
            terms["adversarial"] = weights.adversarial * self.adversarial.generator_loss(sr)
        total = sum(terms.values())
        return total, {**{name: term.detach() for name, term in terms.items()}, **logs}

    def state_dict(self) -> dict[str, Any]:
        """The adversarial part's state (the rest is fixed): register the criterion for checkpointing."""
        return {"adversarial": self.adversarial.state_dict()} if self.adversarial is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.adversarial is not None:
            if "adversarial" not in state:
                raise ValueError("the saved criterion has no discriminator state (saved without adversarial loss?)")
            self.adversarial.load_state_dict(state["adversarial"])
