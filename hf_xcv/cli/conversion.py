"""What every converter CLI shares: arguments, atomic conversion, optional verification that deletes a bad result."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Callable
from typing import Any

import torch

from hf_xcv.checkpoint_conversion import check_converted, convert_checkpoint
from hf_xcv.conversion import atomic_directory, save_safetensors
from hf_xcv.layers import to_pair
from hf_xcv.remote_code import add_remote_code

from ..utils.errors import UsageError

# verify(source, converted, tolerance, revision) -> worst |delta|; raises ValueError above tolerance
Verifier = Callable[[str, str, float, "str | None"], float]


def run(
    argv: list[str] | None,
    description: str,
    target_model_type: str,
    verify: Verifier,
    source_name: str,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    convert: Callable[[argparse.Namespace], list[str] | None] | None = None,
    input_kinds: str = "folder or Hub repo id",
) -> None:
    """The converter program: parse, convert atomically, optionally verify. ``add_arguments`` adds a converter's own
    options; ``convert(args)`` converts sources that ``convert_checkpoint`` does not read (returns the dropped keys,
    or None to leave the source to ``convert_checkpoint``); ``input_kinds`` says what ``--input`` may be (a converter
    of files only has no ``--revision``)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help=f"{source_name} checkpoint: {input_kinds}")
    parser.add_argument("--output", required=True, help="folder to write the hf_xcv checkpoint to")
    if "Hub" in input_kinds:
        parser.add_argument("--revision", default=None, help="Hub revision of --input")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    parser.add_argument("--verify", action="store_true", help="compare both models' outputs after converting")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    if not args.tolerance > 0:
        parser.error(f"--tolerance must be a positive number, got {args.tolerance}")
    args.revision = getattr(args, "revision", None)
    hub_kwargs = {"revision": args.revision} if args.revision else {}
    try:
        dropped = convert(args) if convert is not None else None
        if dropped is None:
            dropped = convert_checkpoint(
                args.input, args.output, target_model_type, overwrite=args.overwrite, **hub_kwargs
            )
    except (ValueError, OSError) as err:  # a bad source or output: the message says which, no traceback
        raise SystemExit(str(err)) from err
    note = f" (dropped {len(dropped)} keys: {dropped})" if dropped else ""
    print(f"converted {args.input} -> {args.output}{note}")
    if args.verify:
        try:
            delta = verify(args.input, args.output, args.tolerance, args.revision)
        except Exception as err:  # a failed comparison, or a crash of the reference on a broken file: nothing kept
            shutil.rmtree(args.output, ignore_errors=True)
            reason = err if isinstance(err, ValueError) else f"verification failed: {type(err).__name__}: {err}"
            raise SystemExit(f"{reason}; removed {args.output}") from err
        print(f"verified: max |delta| = {delta:.3e}")


def is_official_file(source: str) -> bool:
    """Whether ``--input`` is an original checkpoint file, which a program converts itself, rather than a
    transformers folder or Hub repo (left to the shared conversion). A ``.pth`` / ``.pt`` path that is no file is
    refused by name: it is no repo id to look up."""
    if os.path.isfile(source):
        return True
    if source.endswith((".pth", ".pt")):
        raise UsageError(f"{source}: no such file")
    return False


def check_deltas(deltas: dict[str, float], tolerance: float) -> float:
    worst = max(deltas.values())
    if worst > tolerance:
        raise UsageError(f"verification failed: max |delta| {deltas} > {tolerance:.1e}")
    return worst


def write_converted(
    config: dict[str, Any],
    state_dict: dict[str, Any],
    processor: Any,
    output: str,
    target_model_type: str,
    source: str,
    overwrite: bool,
) -> None:
    """Write an hf_xcv folder (config, weights, processor) converted from an original file, atomically, after
    checking that the weights fill the model the config describes."""
    check_converted(config, state_dict, target_model_type, source)
    with atomic_directory(output, overwrite=overwrite) as staging:
        save_safetensors(state_dict, staging / "model.safetensors")
        with open(staging / "config.json", "w") as handle:
            json.dump(config, handle, indent=2, sort_keys=True)
        processor.save_pretrained(staging)
        add_remote_code(staging)  # as save_pretrained writes it (hf_xcv.remote_code)


def verify_detector(theirs: torch.nn.Module, ours: torch.nn.Module, tolerance: float) -> float:
    """Largest |difference| of a transformers detector's and hf_xcv's logits and boxes, in eval mode on
    :func:`sample_inputs`' padded batch; an error above ``tolerance``."""
    theirs, ours = theirs.eval(), ours.eval()
    inputs = sample_inputs(ours)
    with torch.no_grad():
        a, b = theirs(**inputs), ours(**inputs)
    return check_deltas(output_deltas(a, b, ("logits", "pred_boxes")), tolerance)


# The outputs compared between a model and its conversion or export, where both have them.
COMPARED_OUTPUTS = ("logits", "pred_boxes", "last_hidden_state", "feature_maps", "reconstruction")


def output_deltas(a: Any, b: Any, names: tuple[str, ...] = COMPARED_OUTPUTS) -> dict[str, float]:
    """Largest |difference| of each of the ``names`` outputs that ``a`` and ``b`` both hold (a tuple of maps, such
    as a backbone's ``feature_maps``, by its worst map)."""
    deltas = {}
    for name in names:
        x, y = getattr(a, name, None), getattr(b, name, None)
        if x is None or y is None:
            continue
        pairs = zip(x, y, strict=True) if isinstance(x, (tuple, list)) else [(x, y)]
        deltas[name] = max((u.float() - v.float()).abs().max().item() for u, v in pairs)
    return deltas


def sample_inputs(model: torch.nn.Module, batch: int = 2) -> dict[str, torch.Tensor]:
    """Random inputs for comparing a model with its conversion or export, from a fixed generator: images of the
    config's size for an image model; for a detector (no fixed size) a padded batch of two images of different
    sizes (320x384, and 224x256 inside it) with its pixel mask; token ids (with a target prefix for an
    encoder-decoder) for a text model."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    if model.main_input_name == "pixel_values" and not hasattr(config, "image_size"):
        pixels = torch.randn(2, config.num_channels, 320, 384, generator=generator)
        mask = torch.ones(2, 320, 384, dtype=torch.long)
        mask[1, 224:] = 0
        mask[1, :, 256:] = 0
        pixels[1] *= mask[1]
        return {"pixel_values": pixels, "pixel_mask": mask}
    if model.main_input_name == "pixel_values":
        size = to_pair(config.image_size)
        return {"pixel_values": torch.randn(batch, config.num_channels, *size, generator=generator)}
    ids = torch.randint(4, config.vocab_size, (batch, 7), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if config.is_encoder_decoder:
        vocab = getattr(config, "decoder_vocab_size", None) or config.vocab_size
        inputs["decoder_input_ids"] = torch.randint(4, vocab, (batch, 5), generator=generator)
    return inputs
