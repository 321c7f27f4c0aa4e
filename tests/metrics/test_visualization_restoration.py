"""restoration_panel: LR, bicubic, output and HR side by side, the tiles holding the given pixels."""

from __future__ import annotations

import numpy as np
import PIL.Image
import pytest
import torch

from hf_xcv.visualization import restoration_panel

PAD = 4
WHITE = (255, 255, 255)


def example(height: int, width: int, seed: int = 0) -> dict[str, PIL.Image.Image]:
    """An HR image (smooth enough for bicubic to score), its x4 LR and a noisy "output"."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8)
    hr = PIL.Image.fromarray(base).resize((width, height), PIL.Image.BILINEAR)
    noise = rng.integers(-6, 7, (height, width, 3))
    output = np.clip(np.asarray(hr).astype(int) + noise, 0, 255).astype(np.uint8)
    return {"lr": hr.resize((width // 4, height // 4), PIL.Image.BICUBIC), "output": output, "hr": hr}


def tile(panel: PIL.Image.Image, x: int, y: int, size: tuple[int, int]) -> np.ndarray:
    return np.asarray(panel)[y : y + size[1], x : x + size[0]]


def caption_height() -> int:
    """Read back from a one-row panel: its height less the tile and the padding above and below."""
    return restoration_panel([example(16, 16)]).height - 16 - 2 * PAD


def test_one_row_layout_and_pixels():
    row = example(96, 128)
    panel = restoration_panel([row], output_label="TTSR")
    caption = caption_height()
    assert panel.size == (4 * 128 + 5 * PAD, 96 + caption + 2 * PAD)
    lr_up = row["lr"].resize((128, 96), PIL.Image.NEAREST)
    bicubic = row["lr"].resize((128, 96), PIL.Image.BICUBIC)
    for column, expected in enumerate([lr_up, bicubic, row["output"], row["hr"]]):
        x = PAD + column * (128 + PAD)
        assert np.array_equal(tile(panel, x, PAD + caption, (128, 96)), np.asarray(expected)), column
        assert (tile(panel, x, PAD, (128, caption)) < 128).any(), f"no caption above tile {column}"
    assert (np.asarray(lr_up)[:4, :4] == np.asarray(lr_up)[0, 0]).all()  # LR pixels show as 4x4 blocks


def test_rows_of_different_sizes_are_padded_and_a_reference_column_appears():
    big, small = example(96, 128, 1), example(64, 96, 2)
    reference = np.random.default_rng(3).integers(0, 256, (112, 80, 3), dtype=np.uint8)
    bicubic = np.full((64, 96, 3), 7, np.uint8)
    panel = restoration_panel([big, {**small, "reference": reference, "bicubic": bicubic, "title": "cat"}])
    caption = caption_height()
    widths, heights = [128, 128, 128, 128, 80], [96, 112]  # the second row is as high as its reference
    assert panel.size == (sum(widths) + 6 * PAD, sum(heights) + 2 * caption + 3 * PAD)
    second = PAD + caption + 96 + PAD + caption  # row 0, then row 1's caption
    xs = [PAD + sum(widths[:k]) + k * PAD for k in range(5)]
    assert np.array_equal(tile(panel, xs[1], second, (96, 64)), bicubic)  # the given bicubic, not PIL's
    assert np.array_equal(tile(panel, xs[2], second, (96, 64)), small["output"])
    assert np.array_equal(tile(panel, xs[3], second, (96, 64)), small["hr"])
    assert np.array_equal(tile(panel, xs[4], second, (80, 112)), reference)
    assert (tile(panel, xs[3] + 96, second, (32, 64)) == WHITE).all()  # padding right of a narrower tile
    assert (tile(panel, xs[3], second + 64, (96, 48)) == WHITE).all()  # and below it
    assert (tile(panel, xs[4], PAD, (80, caption + 96)) == WHITE).all()  # no reference in row 0


def test_a_column_is_at_least_as_wide_as_its_captions():
    panel = restoration_panel([example(16, 16)])  # "bicubic 12.34 dB" is wider than 16 pixels
    assert panel.width > 4 * 16 + 5 * PAD


def test_tensors_and_arrays_are_accepted_and_captions_can_be_replaced():
    row = example(96, 96)
    as_tensor = torch.from_numpy(np.asarray(row["output"]).transpose(2, 0, 1).copy()).float() / 255
    panel = restoration_panel([{**row, "output": as_tensor, "captions": {"hr": ""}}], psnr_channel=None)
    caption = caption_height()
    x = PAD + 2 * (96 + PAD)
    assert np.array_equal(tile(panel, x, PAD + caption, (96, 96)), row["output"])
    assert (tile(panel, x + 96 + PAD, PAD, (96, caption)) == WHITE).all()  # the HR caption emptied


# fmt: off
@pytest.mark.parametrize(("rows", "message"), [
    ([], r"needs at least one row"),
    (["image"], r"rows\[0\] must be a mapping with 'lr', 'output' and 'hr', got str"),
    ([{"lr": np.zeros((8, 8, 3), np.uint8), "hr": np.zeros((32, 32, 3), np.uint8)}], r"rows\[0\] lacks \['output'\]"),
    ([{**example(32, 32), "sr": None}], r"rows\[0\] has unknown keys \['sr'\]"),
    ([{**example(32, 32), "hr": np.zeros((32, 36, 3), np.uint8)}],
     r"HR image \(36x32\) must be the LR one \(8x8\) times an integer factor"),
    ([example(32, 32), {**example(32, 32), "output": np.zeros((28, 32, 3), np.uint8)}],
     r"rows\[1\]: 'output' is 32x28 but 'hr' is 32x32"),
])  # fmt: on
def test_bad_rows(rows, message):
    with pytest.raises(ValueError, match=message):
        restoration_panel(rows)
