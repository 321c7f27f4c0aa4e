"""TTSR's perceptual, transferal perceptual and adversarial losses, and VGG19 weights from a user's file.

Every loss is checked against a hand computation; the VGG19 files are random weights in torchvision's format
(the real ones are never downloaded).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn
from torch.nn import functional as F

from hf_xcv import TTSRForReferenceSuperResolution, preset_config
from hf_xcv.conversion.checkpoint_io import CheckpointMismatchError, CorruptCheckpointError
from hf_xcv.conversion.vgg import (
    load_perceptual_vgg,
    load_texture_extractor,
    load_vgg19_features,
    save_vgg19_features,
    vgg19_feature_shapes,
)
from hf_xcv.layers.vgg import IMAGENET_MEAN, IMAGENET_STD, RELU3_1, RELU5_1, VGG19Features
from hf_xcv.losses import (
    TTSR_LOSS_WEIGHTS,
    TTSR_REC_LOSS_WEIGHTS,
    TTSRAdversarialLoss,
    TTSRCriterion,
    TTSRDiscriminator,
    TTSRLossWeights,
    gradient_penalty,
    perceptual_loss,
    texture_loss,
    transferal_perceptual_loss,
    wgan_discriminator_loss,
)

VGG_WIDTHS = [64, 128, 256]
NARROW = {"widths": (4, 4, 8, 8, 8), "hidden_size": 16}  # the original's structure, narrow: fast on a CPU


def narrow_critic(in_size: int = 16) -> TTSRDiscriminator:
    return TTSRDiscriminator(in_size=in_size, **NARROW)


def images(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1


@pytest.fixture(scope="module")
def tiny_model() -> TTSRForReferenceSuperResolution:
    torch.manual_seed(0)
    return TTSRForReferenceSuperResolution(preset_config("ttsr-test-tiny"))


def ttsr_inputs(side: int = 4) -> dict[str, torch.Tensor]:
    """An LR of ``side`` x ``side`` and a 4 * side reference with their bicubic companions, and HR labels."""
    lr, ref = images(2, 3, side, side, seed=1), images(2, 3, 4 * side, 4 * side, seed=2)
    return {
        "pixel_values": lr,
        "upsampled_pixel_values": F.interpolate(lr, scale_factor=4, mode="bicubic").clamp(-1, 1),
        "reference_pixel_values": ref,
        "degraded_reference_pixel_values": F.interpolate(F.avg_pool2d(ref, 4), scale_factor=4, mode="bicubic"),
        "labels": images(2, 3, 4 * side, 4 * side, seed=3),
    }


@pytest.fixture(scope="module")
def vgg_weights() -> dict[str, torch.Tensor]:
    """Random VGG19 features[:30] in torchvision's names, plus a (small) stand-in for its classifier."""
    generator = torch.Generator().manual_seed(0)
    weights = {name: torch.randn(shape, generator=generator) * 0.05 for name, shape in vgg19_feature_shapes().items()}
    weights["classifier.6.bias"] = torch.zeros(1000)
    return weights


@pytest.fixture(scope="module")
def vgg_files(vgg_weights, tmp_path_factory) -> dict[str, str]:
    """The weights as torchvision's legacy .pth (as vgg19-dcbb9e9d.pth), a zip .pth and a safetensors file."""
    folder = tmp_path_factory.mktemp("vgg")
    files = {
        "legacy": folder / "vgg19.pth",
        "zip": folder / "vgg19-zip.pth",
        "safetensors": folder / "vgg19.safetensors",
    }
    torch.save(vgg_weights, files["legacy"], _use_new_zipfile_serialization=False)
    torch.save(vgg_weights, files["zip"])
    save_file(vgg_weights, str(files["safetensors"]))
    return {kind: str(path) for kind, path in files.items()}


# --- perceptual loss -------------------------------------------------------------------------------------------


def test_perceptual_loss_is_mse_of_normalised_vgg_features():
    torch.manual_seed(0)
    vgg = VGG19Features(num_layers=7).requires_grad_(False)  # small: up to relu2_1
    sr, hr = images(2, 3, 16, 16, seed=1).requires_grad_(True), images(2, 3, 16, 16, seed=2).requires_grad_(True)
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    by_hand = (vgg.features(((sr + 1) / 2 - mean) / std) - vgg.features(((hr + 1) / 2 - mean) / std)).square().mean()
    loss = perceptual_loss(vgg, sr, hr)
    torch.testing.assert_close(loss, by_hand)
    loss.backward()
    assert sr.grad is not None and sr.grad.abs().sum() > 0
    assert hr.grad is None  # the HR side has no gradient
    assert all(p.grad is None for p in vgg.parameters())


# --- transferal perceptual loss --------------------------------------------------------------------------------


def test_texture_loss_on_constant_differences():
    textures = [torch.zeros(2, 16, 3, 4), torch.zeros(2, 8, 6, 8), torch.zeros(2, 4, 12, 16)]
    offsets = (0.5, -1.0, 2.0)
    features = [t + c for t, c in zip(textures, offsets)]
    assert texture_loss(features, textures).item() == pytest.approx((0.25 + 1 + 4) / 3)
    assert texture_loss(features, textures, kind="l1").item() == pytest.approx((0.5 + 1 + 2) / 3)
    # S = 0 everywhere: sigmoid 1/2 at every level (bicubic keeps a constant), on both sides
    zero = torch.zeros(2, 1, 3, 4)
    assert texture_loss(features, textures, zero).item() == pytest.approx(0.25 * (0.25 + 1 + 4) / 3)
    assert texture_loss(features, textures, zero, kind="l1").item() == pytest.approx(0.5 * (0.5 + 1 + 2) / 3)


def test_texture_loss_soft_attention_weights_each_level():
    generator = torch.Generator().manual_seed(0)
    shapes = [(2, 16, 3, 4), (2, 8, 6, 8), (2, 4, 12, 16)]
    features = [torch.randn(s, generator=generator) for s in shapes]
    textures = [torch.randn(s, generator=generator) for s in shapes]
    soft = torch.rand(2, 1, 3, 4, generator=generator) * 2 - 1
    by_hand = 0
    for level, (f, t) in enumerate(zip(features, textures)):
        weight = torch.sigmoid(F.interpolate(soft, size=(3 * 2**level, 4 * 2**level), mode="bicubic"))
        by_hand = by_hand + ((f - t) * weight).square().mean() / 3
    torch.testing.assert_close(texture_loss(features, textures, soft), by_hand)
    with pytest.raises(ValueError, match="kind"):
        texture_loss(features, textures, kind="gram")
    with pytest.raises(ValueError, match="level 1"):
        texture_loss(features, [textures[0], textures[0], textures[2]])


def test_transferal_loss_compares_extractor_features_of_sr_with_t(tiny_model):
    inputs = ttsr_inputs()
    outputs = tiny_model(**{k: v for k, v in inputs.items() if k != "labels"})
    sr, textures = outputs.reconstruction, outputs.transferred_textures
    extractor = tiny_model.ttsr.texture_extractor
    lv1, lv2, lv3 = extractor(sr)
    by_hand = sum(F.mse_loss(f, t) for f, t in zip((lv3, lv2, lv1), textures)) / 3
    torch.testing.assert_close(transferal_perceptual_loss(extractor, sr, textures), by_hand)


def test_transferal_loss_gradients_reach_sr_and_the_extractor_only_through_t(tiny_model):
    inputs = ttsr_inputs()
    outputs = tiny_model(**{k: v for k, v in inputs.items() if k != "labels"})
    extractor = tiny_model.ttsr.texture_extractor
    sr = outputs.reconstruction.detach().requires_grad_(True)
    textures = outputs.transferred_textures

    # T detached: the extractor gets nothing (the SR branch reads it frozen), SR gets a gradient
    tiny_model.zero_grad(set_to_none=True)
    transferal_perceptual_loss(extractor, sr, [t.detach() for t in textures]).backward()
    assert sr.grad is not None and sr.grad.abs().sum() > 0
    assert all(p.grad is None for p in extractor.parameters())

    # T attached: the extractor's gradient is the one through T alone (the SR features as constants)
    tiny_model.zero_grad(set_to_none=True)
    transferal_perceptual_loss(extractor, sr, textures).backward(retain_graph=True)
    full = {name: p.grad.clone() for name, p in extractor.named_parameters()}
    tiny_model.zero_grad(set_to_none=True)
    lv1, lv2, lv3 = (f.detach() for f in extractor(sr))
    texture_loss((lv3, lv2, lv1), textures).backward()
    for name, p in extractor.named_parameters():
        assert full[name].abs().sum() > 0, name
        torch.testing.assert_close(full[name], p.grad, msg=name)
    tiny_model.zero_grad(set_to_none=True)


# --- discriminator and WGAN-GP ---------------------------------------------------------------------------------


def test_discriminator_shapes_and_in_size_error():
    torch.manual_seed(0)
    discriminator = TTSRDiscriminator(in_size=32)
    assert discriminator(images(3, 3, 32, 32)).shape == (3, 1)
    assert discriminator.fc1.in_features == 512  # 32 / 2^5 = 1
    assert TTSRDiscriminator(160).fc1.in_features == 5 * 5 * 512  # the original's, on its 160 x 160 crops
    odd = narrow_critic(in_size=40)  # 40 -> 20 -> 10 -> 5 -> 3 -> 2 (each stride-2 convolution rounds up)
    assert odd.fc1.in_features == 8 * 2 * 2 and odd(images(2, 3, 40, 40)).shape == (2, 1)
    convs = [m for m in discriminator.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 32, 64, 64, 128, 128, 256, 256, 512, 512]
    assert [c.stride[0] for c in convs] == [1, 2] * 5
    with pytest.raises(ValueError, match="in_size=32"):
        discriminator(images(1, 3, 48, 48))
    with pytest.raises(ValueError, match="in_size"):
        TTSRDiscriminator(in_size=0)


class Quadratic(nn.Module):
    """D(x) = sum(x^2) / 2 per image: its input gradient is x itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.square().flatten(1).sum(1, keepdim=True) / 2


def test_gradient_penalty_by_hand():
    fake, real = images(4, 3, 5, 5, seed=1), images(4, 3, 5, 5, seed=2)
    penalty = gradient_penalty(Quadratic(), real, fake, 10.0, torch.Generator().manual_seed(7))
    epsilon = torch.rand(4, 1, 1, 1, generator=torch.Generator().manual_seed(7))
    mixed = fake * (1 - epsilon) + real * epsilon
    torch.testing.assert_close(penalty, 10 * (mixed.flatten(1).norm(dim=1) - 1).square().mean())
    # a linear critic has the same gradient everywhere, whatever the interpolates
    linear = nn.Sequential(nn.Flatten(), nn.Linear(75, 1))
    expected = 10 * (linear[1].weight.norm() - 1) ** 2
    torch.testing.assert_close(gradient_penalty(linear, real, fake), expected)


def test_gradient_penalty_of_the_discriminator_per_image():
    torch.manual_seed(0)
    discriminator = narrow_critic()
    fake, real = images(3, 3, 16, 16, seed=1), images(3, 3, 16, 16, seed=2)
    penalty = gradient_penalty(discriminator, real, fake, 10.0, torch.Generator().manual_seed(3))
    epsilon = torch.rand(3, generator=torch.Generator().manual_seed(3))
    norms = []
    for i in range(3):
        x = (fake[i] * (1 - epsilon[i]) + real[i] * epsilon[i]).unsqueeze(0).requires_grad_(True)
        norms.append(torch.autograd.grad(discriminator(x).sum(), x)[0].norm())
    torch.testing.assert_close(penalty, 10 * (torch.stack(norms) - 1).square().mean())
    penalty.backward()  # the penalty trains the critic
    assert discriminator.fc1.weight.grad is not None


def test_discriminator_step_changes_d_and_leaves_the_generator_alone(tiny_model):
    torch.manual_seed(0)
    inputs = ttsr_inputs()
    before = copy.deepcopy(tiny_model.state_dict())
    tiny_model.zero_grad(set_to_none=True)
    sr = tiny_model(**{k: v for k, v in inputs.items() if k != "labels"}).reconstruction
    adversarial = TTSRAdversarialLoss(narrow_critic(), generator=torch.Generator().manual_seed(0))
    critic_before = copy.deepcopy(adversarial.discriminator.state_dict())
    loss = adversarial.discriminator_step(sr, inputs["labels"])
    assert loss.ndim == 0 and not loss.requires_grad
    assert adversarial.optimizer.state_dict()["state"][0]["step"].item() == 2  # gan_k updates
    weights = [k for k in critic_before if k.endswith("weight")]  # fc2.bias has no WGAN gradient (E D(f) - E D(r))
    assert all(not torch.equal(adversarial.discriminator.state_dict()[k], critic_before[k]) for k in weights)
    assert all(p.grad is None for p in tiny_model.parameters())
    assert all(torch.equal(v, before[k]) for k, v in tiny_model.state_dict().items())
    # the generator's loss is -D(SR) and its gradient reaches the generator
    generator_loss = adversarial.generator_loss(sr)
    torch.testing.assert_close(generator_loss, -adversarial.discriminator(sr).mean())
    generator_loss.backward()
    assert tiny_model.head.conv_tail2.weight.grad.abs().sum() > 0
    tiny_model.zero_grad(set_to_none=True)


def test_adversarial_loss_optimizer_is_the_originals():
    adversarial = TTSRAdversarialLoss(narrow_critic())
    group = adversarial.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"]) == (1e-4, (0.0, 0.9), 1e-8)
    assert adversarial.gan_k == 2 and adversarial.penalty_weight == 10.0
    with pytest.raises(ValueError, match="gan_k"):
        TTSRAdversarialLoss(narrow_critic(), gan_k=0)


def make_adversarial(seed: int) -> TTSRAdversarialLoss:
    torch.manual_seed(seed)
    return TTSRAdversarialLoss(narrow_critic(), generator=torch.Generator().manual_seed(seed))


def test_adversarial_state_dict_round_trip_gives_identical_next_steps(tmp_path):
    fake, real = images(2, 3, 16, 16, seed=1), images(2, 3, 16, 16, seed=2)
    first = make_adversarial(0)
    first.discriminator_step(fake, real)
    torch.save(first.state_dict(), tmp_path / "adversarial.pt")
    expected_loss = first.discriminator_step(fake, real)
    expected = first.discriminator.state_dict()

    resumed = make_adversarial(1)  # other weights, other interpolation draws
    resumed.load_state_dict(torch.load(tmp_path / "adversarial.pt", weights_only=True))
    assert torch.equal(resumed.discriminator_step(fake, real), expected_loss)
    for name, value in resumed.discriminator.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_wgan_discriminator_loss_by_hand():
    linear = nn.Sequential(nn.Flatten(), nn.Linear(75, 1))
    fake, real = images(4, 3, 5, 5, seed=1), images(4, 3, 5, 5, seed=2)
    wasserstein = (linear(fake) - linear(real)).mean()
    expected = wasserstein + 10 * (linear[1].weight.norm() - 1) ** 2
    torch.testing.assert_close(wgan_discriminator_loss(linear, real, fake), expected)


# --- the weighted criterion ------------------------------------------------------------------------------------


def test_loss_weights_are_the_originals():
    assert (TTSR_LOSS_WEIGHTS.reconstruction, TTSR_LOSS_WEIGHTS.perceptual) == (1.0, 1e-2)
    assert (TTSR_LOSS_WEIGHTS.transferal_perceptual, TTSR_LOSS_WEIGHTS.adversarial) == (1e-2, 1e-3)
    assert TTSR_REC_LOSS_WEIGHTS == TTSRLossWeights(1.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="perceptual"):
        TTSRLossWeights(perceptual=-1.0)


def test_criterion_total_is_the_weighted_sum(tiny_model):
    torch.manual_seed(0)
    inputs = ttsr_inputs()
    labels = inputs.pop("labels")
    vgg = VGG19Features(num_layers=7).requires_grad_(False)
    adversarial = make_adversarial(0)
    criterion = TTSRCriterion(vgg, adversarial)
    outputs = tiny_model(**inputs)
    total, logs = criterion(tiny_model, outputs, labels)
    sr = outputs.reconstruction
    assert set(logs) == {"reconstruction", "perceptual", "transferal_perceptual", "adversarial", "discriminator"}
    extractor = tiny_model.ttsr.texture_extractor
    expected = {
        "reconstruction": (sr - labels).abs().mean(),
        "perceptual": 1e-2 * perceptual_loss(vgg, sr, labels),
        "transferal_perceptual": 1e-2 * transferal_perceptual_loss(extractor, sr, outputs.transferred_textures),
        "adversarial": -1e-3 * adversarial.discriminator(sr).mean(),  # the critic after its two steps
    }
    for name, value in expected.items():
        torch.testing.assert_close(logs[name], value.detach(), msg=name)
    torch.testing.assert_close(total, sum(expected.values()))
    assert total.requires_grad and not logs["reconstruction"].requires_grad

    steps = adversarial.optimizer.state_dict()["state"][0]["step"].item()
    total, logs = criterion(tiny_model, outputs, labels, reconstruction_only=True)  # the original's first epochs
    assert set(logs) == {"reconstruction"} and adversarial.optimizer.state_dict()["state"][0]["step"].item() == steps
    torch.testing.assert_close(total, (sr - labels).abs().mean())


def test_criterion_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="VGG19"):
        TTSRCriterion(None, make_adversarial(0))
    with pytest.raises(ValueError, match="frozen"):
        TTSRCriterion(VGG19Features(num_layers=2), make_adversarial(0))
    with pytest.raises(ValueError, match="TTSRAdversarialLoss"):
        TTSRCriterion(VGG19Features(num_layers=2).requires_grad_(False))
    rec_only = TTSRCriterion(weights=TTSR_REC_LOSS_WEIGHTS)
    assert rec_only.state_dict() == {}


# --- VGG19 weights from a user's file ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["legacy", "zip", "safetensors"])
def test_vgg19_features_round_trip(vgg_files, vgg_weights, kind):
    loaded = load_vgg19_features(vgg_files[kind], RELU3_1)
    assert sorted(loaded) == sorted(vgg19_feature_shapes(RELU3_1))  # only what was asked, no classifier
    for name, tensor in loaded.items():
        assert torch.equal(tensor, vgg_weights[name]), name


def test_perceptual_vgg_is_frozen_with_the_files_weights(vgg_files, vgg_weights):
    vgg = load_perceptual_vgg(vgg_files["safetensors"])
    assert not vgg.training and not any(p.requires_grad for p in vgg.parameters())
    assert len(vgg.features) == RELU5_1 and sum(p.numel() for p in vgg.parameters()) == 12_944_960
    for name, tensor in vgg.state_dict().items():
        assert torch.equal(tensor, vgg_weights[name]), name


def test_vgg19_file_errors(vgg_files, vgg_weights, tmp_path):
    path = str(tmp_path / "missing.pth")
    broken = {k: v for k, v in vgg_weights.items() if k != "features.28.weight"}
    torch.save(broken, path)
    with pytest.raises(ValueError, match=r"missing\.pth lacks 1 .*features\.28\.weight"):
        load_vgg19_features(path)
    load_vgg19_features(path, RELU3_1)  # features[:12] does not need conv5_1

    path = str(tmp_path / "wrong.safetensors")
    save_file({**vgg_weights, "features.5.weight": torch.zeros(128, 32, 3, 3)}, path)
    with pytest.raises(CheckpointMismatchError, match=r"wrong\.safetensors .*features\.5\.weight \(file \[128, 32"):
        load_vgg19_features(path)

    for kind in ("zip", "safetensors", "legacy"):
        data = Path(vgg_files[kind]).read_bytes()
        truncated = tmp_path / f"truncated-{kind}{'.safetensors' if kind == 'safetensors' else '.pth'}"
        truncated.write_bytes(data[: len(data) // 2])
        with pytest.raises(CorruptCheckpointError, match="truncated"):
            load_vgg19_features(truncated)
    (tmp_path / "noise.pth").write_bytes(b"not a checkpoint" * 10)
    with pytest.raises(CorruptCheckpointError, match=r"noise\.pth"):
        load_vgg19_features(tmp_path / "noise.pth")
    torch.save([torch.zeros(1)], tmp_path / "list.pth")
    with pytest.raises(CorruptCheckpointError, match="not a state dict"):
        load_vgg19_features(tmp_path / "list.pth")
    with pytest.raises(FileNotFoundError, match="vgg19-dcbb9e9d.pth"):
        load_vgg19_features(tmp_path / "absent.pth")


def test_texture_extractor_initialised_from_vgg19(vgg_files, vgg_weights):
    torch.manual_seed(0)
    model = TTSRForReferenceSuperResolution(preset_config("ttsr-test-tiny", texture_channels=VGG_WIDTHS))
    load_texture_extractor(model, vgg_files["legacy"])
    extractor = model.ttsr.texture_extractor
    for ours, index in [("slice1.0", 0), ("slice2.2", 2), ("slice2.5", 5), ("slice3.7", 7), ("slice3.10", 10)]:
        for kind in ("weight", "bias"):
            assert torch.equal(
                extractor.get_submodule(ours).get_parameter(kind), vgg_weights[f"features.{index}.{kind}"]
            )
    vgg = VGG19Features(RELU3_1)
    vgg.load_state_dict(load_vgg19_features(vgg_files["zip"], RELU3_1))
    x = images(1, 3, 16, 16)
    torch.testing.assert_close(extractor(x)[2], vgg(x))  # relu3_1 of the same network


def test_texture_extractor_of_other_widths_is_refused(tiny_model, vgg_files):
    with pytest.raises(ValueError, match=r"texture_channels=\[4, 8, 16\].*\[64, 128, 256\]"):
        load_texture_extractor(tiny_model, vgg_files["zip"])


def test_save_relu5_1_features(vgg_files, vgg_weights, tmp_path):
    output = save_vgg19_features(vgg_files["legacy"], tmp_path / "out" / "vgg19-relu5_1.safetensors")
    assert not list(output.parent.glob(".*"))  # no staging file left behind
    assert 49_000_000 < output.stat().st_size < 52_000_000
    loaded = load_vgg19_features(output)
    assert sorted(loaded) == sorted(vgg19_feature_shapes(RELU5_1))
    assert all(torch.equal(v, vgg_weights[k]) for k, v in loaded.items())
