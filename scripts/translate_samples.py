"""Reload a trained translation folder in this (fresh) process through the Auto classes and translate held-out text.

    python scripts/translate_samples.py outputs/transformer-numbers [--min_bleu 80]

Loads the folder with AutoTokenizer and AutoModelForSeq2SeqLM, rebuilds the test split the run was scored on (the
built-in number corpus, with the data arguments recorded in the run's xcv_run.json, or a saved DatasetDict),
translates all of it with beam search, prints BLEU, chrF and a few translations, checks the BLEU against the one the
model card records, and fails when it is below ``--min_bleu``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import yaml
from datasets import Dataset, load_from_disk
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_xcv  # noqa: F401  (registers the hf_xcv model types)
from hf_xcv.data import load_number_translation_dataset, translation_texts
from hf_xcv.metrics import Bleu, ChrF

RUN_MARKER = "xcv_run.json"
BLEU_TOLERANCE = 0.5  # batching differs from the training run's: a rare tie may break the other way


def held_out_split(folder: Path) -> tuple[Dataset, str, str, int]:
    """The held-out split the run was scored on, its languages and the run's evaluation batch size."""
    run = json.loads((folder / RUN_MARKER).read_text()) if (folder / RUN_MARKER).exists() else {}
    data, train = run.get("data", {}), run.get("train", {})
    source, target = data.get("source_lang", "en"), data.get("target_lang", "fr")
    split = data.get("test_split", "test")
    if data.get("dataset", "numbers") == "numbers":
        sizes = {key: data[key] for key in ("train_size", "validation_size", "test_size") if key in data}
        splits = load_number_translation_dataset(source, target, seed=data.get("dataset_seed", 0), **sizes)
    else:
        splits = load_from_disk(data["dataset"])
    return splits[split], source, target, train.get("per_device_eval_batch_size", 128)


@torch.no_grad()
def translate(model, tokenizer, texts: list[str], batch_size: int, num_beams: int) -> list[str]:
    hypotheses = []
    for start in range(0, len(texts), batch_size):
        inputs = tokenizer(texts[start : start + batch_size], padding=True, return_tensors="pt")
        generated = model.generate(**inputs, num_beams=num_beams)
        hypotheses += tokenizer.batch_decode(generated, skip_special_tokens=True)
    return hypotheses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--min_bleu", type=float, default=0.0)
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.folder).eval()
    print(f"loaded {type(model).__name__} and {type(tokenizer).__name__} from {args.folder}")
    meta = yaml.safe_load((args.folder / "README.md").read_text().split("---")[1])
    recorded = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    print(f"model card: test BLEU {recorded['bleu']:.2f}, chrF {recorded['chrf']:.2f}")

    split, source, target, batch_size = held_out_split(args.folder)
    sources, references = translation_texts(split, source), translation_texts(split, target)
    hypotheses = translate(model, tokenizer, sources, batch_size, args.num_beams)
    bleu = Bleu().compute(predictions=hypotheses, references=references)["score"]
    chrf = ChrF().compute(predictions=hypotheses, references=references)["score"]
    exact = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    print(f"reloaded model on the {len(sources)} held-out {source}->{target} pairs: BLEU {bleu:.2f}, chrF {chrf:.2f}")
    print(f"exact-match translations: {exact:.1%}")
    triples = list(zip(sources, references, hypotheses))
    mistakes = [triple for triple in triples if triple[1] != triple[2]]
    for title, shown in (("examples", triples), ("mistakes", mistakes)):
        print(f"\n{title} ({min(args.samples, len(shown))} of {len(shown)}):")
        for src, ref, hyp in shown[: args.samples]:
            print(f"  source:     {src}\n  reference:  {ref}\n  hypothesis: {hyp}\n")

    if args.num_beams == model.generation_config.num_beams and abs(bleu - recorded["bleu"]) > BLEU_TOLERANCE:
        raise SystemExit(f"the reloaded model scores BLEU {bleu:.2f}, the card records {recorded['bleu']:.2f}")
    if bleu < args.min_bleu:
        raise SystemExit(f"test BLEU {bleu:.2f} is below {args.min_bleu}")


if __name__ == "__main__":
    main()
