"""Mixup / CutMix (DeiT's and Swin's recipe): soft targets that sum to one, CutMix's λ = the unpasted share of the
image, mixed images equal to the hand-made mix in every mode, the switch and mix probabilities, seeding, and the
collator over dict samples (as a datasets.Dataset yields them), in DataLoader workers and in transformers' Trainer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from hf_xcv.data import ImageClassificationCollator, MixDraw, MixupCutmix, MixupCutmixCollator
from hf_xcv.utils.errors import UsageError

NUM_LABELS = 10


def batch(size: int = 8, height: int = 16, width: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images (no two pixels equal between an image and its mirror) and distinct-neighbour labels."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randn(size, 3, height, width, generator=g)
    labels = torch.arange(size) % NUM_LABELS
    return pixels, labels


def mixer(seed: int = 0, **kwargs) -> MixupCutmix:
    return MixupCutmix(NUM_LABELS, generator=torch.Generator().manual_seed(seed), **kwargs)


def smoothed(labels: torch.Tensor, smoothing: float) -> torch.Tensor:
    off = smoothing / NUM_LABELS
    return torch.nn.functional.one_hot(labels, NUM_LABELS).float() * (1 - smoothing) + off


def own_weight(targets: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
    """λ of each row, read back from the targets (each row's label differs from its mirror's)."""
    off = smoothing / NUM_LABELS
    on = 1 - smoothing + off
    return (targets[torch.arange(len(labels)), labels] - off) / (on - off)


def hand_mix(pixels: torch.Tensor, draw: MixDraw) -> torch.Tensor:
    """Row by row: Mixup rows λ x + (1 - λ) x_mirror, CutMix rows x with the box pasted from x_mirror."""
    out = pixels.clone()
    size = len(pixels)
    for i in range(size):
        j = size - 1 - i
        lam = float(draw.lam[i])
        if lam == 1.0:
            continue
        if draw.cutmix[i]:
            y0, y1, x0, x1 = draw.boxes[i].tolist()
            out[i, :, y0:y1, x0:x1] = pixels[j, :, y0:y1, x0:x1]
        else:
            out[i] = lam * pixels[i] + (1 - lam) * pixels[j]
    return out


@pytest.mark.parametrize("mode", ["batch", "elem", "pair"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_targets_are_probabilities_summing_to_one(mode, smoothing):
    pixels, labels = batch()
    for seed in range(20):
        _, targets = mixer(seed, mode=mode, label_smoothing=smoothing)(pixels, labels)
        assert targets.shape == (8, NUM_LABELS) and targets.dtype == torch.float32
        assert (targets >= 0).all()
        torch.testing.assert_close(targets.sum(1), torch.ones(8))


@pytest.mark.parametrize("mode", ["batch", "elem", "pair"])
def test_targets_mix_the_smoothed_one_hot_labels_by_lambda(mode):
    pixels, labels = batch()
    m = mixer(3, mode=mode)
    draw = m.draw(8, 16, 12)
    _, targets = m.apply(pixels, labels, draw)
    y = smoothed(labels, 0.1)  # off = 0.01, on = 0.91: timm's convention
    assert y[0, 0].item() == pytest.approx(0.91) and y[0, 1].item() == pytest.approx(0.01)
    lam = draw.lam.float().unsqueeze(1)
    torch.testing.assert_close(targets, lam * y + (1 - lam) * y.flip(0))


def test_cutmix_lambda_is_the_share_of_the_image_left_unpasted():
    pixels, labels = batch(height=16, width=12)
    seen_clipped = False
    for seed in range(40):
        mixed, targets = mixer(seed, switch_prob=1.0, mode="elem")(pixels, labels)  # CutMix only
        pasted = (mixed != pixels).any(dim=1)  # (B, H, W): the pixels that changed
        for i in range(8):
            area = int(pasted[i].sum())
            if area:  # one rectangle, and it holds the mirror image's pixels
                ys, xs = pasted[i].nonzero(as_tuple=True)
                y0, y1, x0, x1 = int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1
                assert area == (y1 - y0) * (x1 - x0)
                torch.testing.assert_close(mixed[i, :, y0:y1, x0:x1], pixels[7 - i, :, y0:y1, x0:x1])
                seen_clipped |= y0 == 0 or x0 == 0 or y1 == 16 or x1 == 12
            lam = own_weight(targets, labels, 0.1)[i].item()
            assert lam == pytest.approx(1 - area / (16 * 12), abs=1e-6)
    assert seen_clipped  # boxes clipped at the borders were among them


def test_cutmix_box_follows_timm_from_lambda_and_correct_lam_off_keeps_the_drawn_lambda():
    m = mixer(0, mixup_alpha=0.0, correct_lam=True)
    m_raw = mixer(0, mixup_alpha=0.0, correct_lam=False)
    differ = 0
    for _ in range(30):
        a, b = m.draw(4, 32, 32), m_raw.draw(4, 32, 32)
        torch.testing.assert_close(a.boxes, b.boxes)  # the same draws, only λ differs
        y0, y1, x0, x1 = a.boxes[0].tolist()
        assert a.lam[0].item() == pytest.approx(1 - (y1 - y0) * (x1 - x0) / 1024)
        # the box's unclipped sides are 2 * (int(32 * sqrt(1 - λ)) // 2) of the drawn λ
        side = 2 * (int(32 * math.sqrt(1 - b.lam[0].item())) // 2)
        assert y1 - y0 <= side and x1 - x0 <= side
        differ += not math.isclose(a.lam[0].item(), b.lam[0].item())
    assert differ > 0


def test_cutmix_minmax_draws_box_sides_in_range_inside_the_image():
    m = mixer(0, mixup_alpha=0.0, cutmix_alpha=0.0, cutmix_minmax=(0.25, 0.5), correct_lam=False)
    for _ in range(30):
        draw = m.draw(2, 40, 20)
        y0, y1, x0, x1 = draw.boxes[0].tolist()
        assert 10 <= y1 - y0 < 20 and 5 <= x1 - x0 < 10
        assert 0 <= y0 and y1 <= 40 and 0 <= x0 and x1 <= 20
        assert draw.lam[0].item() == pytest.approx(1 - (y1 - y0) * (x1 - x0) / 800)  # always corrected


@pytest.mark.parametrize("mode", ["batch", "elem", "pair"])
def test_mixed_images_equal_the_hand_made_mix(mode):
    pixels, labels = batch()
    kinds = set()
    for seed in range(12):
        m = mixer(seed, mode=mode)
        draw = m.draw(8, 16, 12)
        mixed, _ = m.apply(pixels, labels, draw)
        torch.testing.assert_close(mixed, hand_mix(pixels, draw))
        kinds |= {bool(c) for c in draw.cutmix}
    assert kinds == {True, False}


def test_batch_mixup_is_lam_x_plus_one_minus_lam_x_flipped():
    pixels, labels = batch()
    m = mixer(1, switch_prob=0.0)
    mixed, targets = m(pixels, labels)
    lam = own_weight(targets, labels, 0.1)
    assert torch.allclose(lam, lam[0]) and 0 < lam[0] < 1  # one λ for the batch
    lam = lam[0].item()
    torch.testing.assert_close(mixed, lam * pixels + (1 - lam) * pixels.flip(0))


def test_batch_cutmix_pastes_one_box_from_the_flipped_batch():
    pixels, labels = batch()
    m = mixer(2, switch_prob=1.0)
    draw = m.draw(8, 16, 12)
    assert draw.cutmix.all() and (draw.boxes == draw.boxes[0]).all()
    mixed, _ = m.apply(pixels, labels, draw)
    y0, y1, x0, x1 = draw.boxes[0].tolist()
    expected = pixels.clone()
    expected[:, :, y0:y1, x0:x1] = pixels.flip(0)[:, :, y0:y1, x0:x1]
    assert torch.equal(mixed, expected)


def test_elem_mode_mixes_each_row_by_its_own_lambda():
    pixels, labels = batch()
    m = mixer(4, mode="elem", switch_prob=0.0)
    draw = m.draw(8, 16, 12)
    assert len(set(draw.lam.tolist())) == 8  # every row its own λ
    mixed, targets = m.apply(pixels, labels, draw)
    torch.testing.assert_close(own_weight(targets, labels, 0.1), draw.lam.float())
    for i in range(8):
        lam = draw.lam[i].item()
        torch.testing.assert_close(mixed[i], lam * pixels[i] + (1 - lam) * pixels[7 - i])


def test_pair_mode_shares_a_draw_between_mirrored_rows_and_refuses_an_odd_batch():
    m = mixer(5, mode="pair")
    for _ in range(10):
        draw = m.draw(8, 16, 12)
        assert torch.equal(draw.lam, draw.lam.flip(0))
        assert torch.equal(draw.cutmix, draw.cutmix.flip(0)) and torch.equal(draw.boxes, draw.boxes.flip(0))
    pixels, labels = batch(size=7)
    with pytest.raises(UsageError, match="pair.*even batch, got 7"):
        m(pixels, labels)


@pytest.mark.parametrize("mode", ["batch", "elem"])
def test_an_odd_batch_mixes_its_middle_row_with_itself(mode):
    pixels, labels = batch(size=7)
    for seed in range(5):
        mixed, targets = mixer(seed, mode=mode)(pixels, labels)
        torch.testing.assert_close(mixed[3], pixels[3])
        torch.testing.assert_close(targets[3], smoothed(labels, 0.1)[3])
        torch.testing.assert_close(targets.sum(1), torch.ones(7))


@pytest.mark.parametrize("mode", ["batch", "elem", "pair"])
def test_switch_prob_one_and_zero_select_cutmix_or_mixup_alone(mode):
    for switch_prob, want in ((1.0, True), (0.0, False)):
        m = mixer(6, mode=mode, switch_prob=switch_prob)
        mixed = 0
        for _ in range(20):
            draw = m.draw(8, 16, 12)
            mixed_rows = draw.lam < 1  # (a CutMix box can come out empty: λ near 1 on a small image)
            mixed += int(mixed_rows.sum())
            assert (draw.cutmix[mixed_rows] == want).all()
        assert mixed > 100


def test_one_method_off_leaves_the_other():
    only_mixup = mixer(0, cutmix_alpha=0.0, switch_prob=1.0, mode="elem")
    only_cutmix = mixer(0, mixup_alpha=0.0, switch_prob=0.0, mode="elem")
    for _ in range(10):
        assert not only_mixup.draw(8, 16, 12).cutmix.any()
        draw = only_cutmix.draw(8, 16, 12)
        assert draw.cutmix[draw.lam < 1].all()


@pytest.mark.parametrize("mode", ["batch", "elem", "pair"])
def test_prob_zero_leaves_the_batch_with_smoothed_one_hot_targets(mode):
    pixels, labels = batch()
    mixed, targets = mixer(0, prob=0.0, mode=mode)(pixels, labels)
    assert torch.equal(mixed, pixels)
    torch.testing.assert_close(targets, smoothed(labels, 0.1))


def test_prob_mixes_about_that_share_of_the_rows():
    m = mixer(0, prob=0.3, mode="elem")
    share = np.mean([(m.draw(100, 8, 8).lam < 1).float().mean().item() for _ in range(20)])
    assert 0.25 < share < 0.35


def test_the_same_seed_gives_the_same_batch_and_another_seed_another():
    pixels, labels = batch()
    for mode in ("batch", "elem", "pair"):
        first = [mixer(7, mode=mode)(pixels, labels) for _ in range(2)]
        assert torch.equal(first[0][0], first[1][0]) and torch.equal(first[0][1], first[1][1])
        other = mixer(8, mode=mode)(pixels, labels)
        assert not torch.equal(first[0][1], other[1])
    # the global RNG when no generator is given: torch.manual_seed replays it (as the training loop reseeds)
    m = MixupCutmix(NUM_LABELS, mode="elem")
    torch.manual_seed(11)
    a = m(pixels, labels)
    torch.manual_seed(11)
    b = m(pixels, labels)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_inputs_are_left_unchanged():
    pixels, labels = batch()
    before = pixels.clone(), labels.clone()
    for mode in ("batch", "elem", "pair"):
        mixer(0, mode=mode)(pixels, labels)
    assert torch.equal(pixels, before[0]) and torch.equal(labels, before[1])


def test_bad_settings_and_batches_are_refused_by_name():
    with pytest.raises(UsageError, match="nothing would mix"):
        MixupCutmix(NUM_LABELS, mixup_alpha=0.0, cutmix_alpha=0.0)
    with pytest.raises(UsageError, match="mode must be one of"):
        MixupCutmix(NUM_LABELS, mode="sample")
    with pytest.raises(UsageError, match="switch_prob is a probability"):
        MixupCutmix(NUM_LABELS, switch_prob=1.5)
    with pytest.raises(UsageError, match="label_smoothing"):
        MixupCutmix(NUM_LABELS, label_smoothing=1.0)
    with pytest.raises(UsageError, match="cutmix_minmax"):
        MixupCutmix(NUM_LABELS, cutmix_minmax=(0.5, 0.2))
    with pytest.raises(UsageError, match="num_labels"):
        MixupCutmix(0)
    m = mixer()
    pixels, labels = batch()
    with pytest.raises(UsageError, match=r"labels \[10\] are out of range"):
        m(pixels, torch.tensor([0, 1, 2, 3, 4, 5, 6, 10]))
    with pytest.raises(UsageError, match=r"-100"):
        m(pixels, torch.tensor([0, 1, 2, 3, 4, 5, 6, -100]))
    with pytest.raises(UsageError, match="integer class ids"):
        m(pixels, smoothed(labels, 0.1))  # already mixed targets
    with pytest.raises(UsageError, match="7 labels for 8 images"):
        m(pixels, labels[:7])
    with pytest.raises(UsageError, match="pixel_values"):
        m(pixels[0, 0], labels)


def samples(count: int, label_key: str = "label") -> list[dict]:
    g = torch.Generator().manual_seed(count)
    return [
        {"pixel_values": torch.randn(3, 8, 8, generator=g).numpy(), label_key: i % NUM_LABELS} for i in range(count)
    ]


def test_the_collator_stacks_dict_samples_and_mixes_them():
    features = samples(6)
    collator = MixupCutmixCollator(num_labels=NUM_LABELS, generator=torch.Generator().manual_seed(0))
    out = collator(features)
    plain = ImageClassificationCollator()(features)
    assert set(out) == {"pixel_values", "labels"}
    assert out["pixel_values"].shape == (6, 3, 8, 8) and out["labels"].shape == (6, NUM_LABELS)
    again = MixupCutmix(NUM_LABELS, generator=torch.Generator().manual_seed(0))(plain["pixel_values"], plain["labels"])
    assert torch.equal(out["pixel_values"], again[0]) and torch.equal(out["labels"], again[1])


def test_the_collator_wraps_a_given_collator_and_keeps_its_other_keys():
    def base(features):
        out = ImageClassificationCollator()(features)
        return {**out, "ids": torch.arange(len(features))}

    out = MixupCutmixCollator(base, NUM_LABELS, mode="elem", prob=0.0)(samples(4, "labels"))
    assert torch.equal(out["ids"], torch.arange(4))
    torch.testing.assert_close(out["labels"], smoothed(torch.arange(4), 0.1))


def test_the_collator_refuses_what_it_cannot_mix():
    with pytest.raises(UsageError, match="num_labels"):
        MixupCutmixCollator()
    with pytest.raises(UsageError, match="base_collator must be a callable"):
        MixupCutmixCollator(10)  # the number of classes passed where the base collator goes
    unlabelled = [{"pixel_values": s["pixel_values"]} for s in samples(4)]
    with pytest.raises(UsageError, match="no \\['labels'\\]"):
        MixupCutmixCollator(num_labels=NUM_LABELS)(unlabelled)


def test_workers_do_not_repeat_an_explicit_generators_draws():
    """Every batch holds the same samples: a generator copied into each worker would mix them alike."""
    same = samples(8)
    dataset = [same[i % 8] for i in range(32)]
    collator = MixupCutmixCollator(num_labels=NUM_LABELS, mode="elem", generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    loader = DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=collator)
    targets = [b["labels"] for b in loader]  # (the workers' warning stays in the workers)
    assert len(targets) == 4
    assert not any(torch.equal(targets[0], t) for t in targets[1:])


def test_trainer_trains_a_vit_on_mixed_batches_with_the_loss_per_row(tmp_path):
    """The Trainer counts num_labels items per soft-target row (labels.ne(-100)): the loss must still be the mean
    per image, ~ln(num_labels) at the start, not num_labels times smaller."""
    from transformers import Trainer, TrainingArguments

    import hf_xcv

    config = hf_xcv.preset_config(
        "vit-test-tiny", num_labels=NUM_LABELS, image_size=8, patch_size=2, problem_type="single_label_classification"
    )
    model = hf_xcv.ViTForImageClassification(config)
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=8, gradient_accumulation_steps=2, max_steps=3,
        learning_rate=1e-4, save_strategy="no", report_to="none", use_cpu=True, remove_unused_columns=False,
        seed=0, logging_steps=1,
    )  # fmt: skip
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=samples(64),
        data_collator=MixupCutmixCollator(num_labels=NUM_LABELS),
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3
    assert all(1.5 < loss < 3.5 for loss in losses), losses  # ln 10 = 2.30
