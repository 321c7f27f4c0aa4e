"""hf_xcv Transformer against transformers' MarianMTModel with the same weights, side by side in one run.

    python benchmarks/bench_translation.py [--batch 8] [--source-length 32] [--target-length 32]
        [--new-tokens 32] [--vocab 8000] [--repeats 5] [--threads N] [--no-greedy]

The size is opus-mt's base model (d_model 512, 6+6 layers, 8 heads, ffn 2048, swish, scaled embeddings)
with random weights and a ``--vocab``-token joint vocabulary (8000 by default, to keep memory modest;
opus-mt models have ~58k). MarianMTModel is saved to a temporary folder, and both MarianMTModel and
hf_xcv's ``TransformerForConditionalGeneration`` (converted on load) are loaded back from it, so their
weights sit in the same kind of memory (see ``build_pair``); the logits of both are checked to agree to
1e-4 first, so the two compute the same thing. float32, CPU.

Timed, interleaved (A, B, A, B, ...) so both see the same machine state, median of ``--repeats`` runs,
ratio hf_xcv / transformers (< 1 = hf_xcv faster):

* training step: forward with labels + backward + AdamW step, train mode (dropout 0.1 as Marian's default),
  ``--batch`` sentence pairs of ``--source-length`` / ``--target-length`` tokens, some rows padded;
* beam search: ``generate`` with 4 beams and ``min_new_tokens == max_new_tokens == --new-tokens``, so both
  decode the same number of steps (random weights would otherwise stop at different times); the generated
  token ids are compared and the table says whether they are identical;
* greedy search the same way (skip with ``--no-greedy``).

Generation runs before training, since the AdamW steps change each model's weights (differently, dropout
masks being random). Peak memory is not reported: PyTorch keeps no allocator statistics on CPU
(``torch.cuda.max_memory_allocated`` has no CPU counterpart), tracemalloc does not see ATen's allocations,
and the process's peak RSS (``resource.getrusage``) only ever grows, so it cannot be split between two
models timed in one process. Target: ratio <= 1.0 within run-to-run noise.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import results_file
import torch
import transformers

import hf_xcv


def time_call(step, model) -> float:
    start = time.perf_counter()
    step(model)
    return time.perf_counter() - start


def build_pair(vocab: int):
    """MarianMTModel of opus-mt base size with random weights, and the same checkpoint loaded into hf_xcv."""
    config = transformers.MarianConfig(
        vocab_size=vocab,
        decoder_vocab_size=vocab,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        activation_function="swish",
        scale_embedding=True,
        max_position_embeddings=512,
        pad_token_id=vocab - 1,
        decoder_start_token_id=vocab - 1,
        eos_token_id=0,
        forced_eos_token_id=0,
    )
    with tempfile.TemporaryDirectory() as folder:
        transformers.MarianMTModel(config).save_pretrained(folder)
        # Both load the same checkpoint: from_pretrained leaves the weights memory-mapped from the safetensors
        # file (not 64-byte aligned), where a freshly initialised model holds them in aligned heap memory, and
        # that alone makes the memory-bound small-batch matmuls of decoding a few percent slower.
        theirs = transformers.MarianMTModel.from_pretrained(folder).eval()
        ours = hf_xcv.TransformerForConditionalGeneration.from_pretrained(folder).eval()
    return config, theirs, ours


def make_batch(config, batch: int, source_length: int, target_length: int):
    """Random source ids ending in </s> with rows of decreasing length (right-padded), and labels likewise."""
    pad, eos = config.pad_token_id, config.eos_token_id  # vocab - 1 and 0 (build_pair)

    def rows(length: int, fill: int):
        ids = torch.randint(1, config.vocab_size - 1, (batch, length))  # neither </s> nor <pad>
        mask = torch.ones(batch, length, dtype=torch.long)
        for i in range(batch):
            n = max(2, length - 3 * (i % 4))  # lengths L, L-3, L-6, L-9, L, ...
            ids[i, n - 1] = eos
            ids[i, n:] = fill
            mask[i, n:] = 0
        return ids, mask

    input_ids, attention_mask = rows(source_length, pad)
    labels, _ = rows(target_length, -100)
    return input_ids, attention_mask, labels


def interleaved(step, theirs, ours, repeats: int) -> dict[str, float]:
    """Median seconds of ``step`` on each model, timed A, B, A, B, ... after one warm-up call each."""
    step(theirs)
    step(ours)
    times = {"transformers": [], "hf_xcv": []}
    for _ in range(repeats):
        times["transformers"].append(time_call(step, theirs))
        times["hf_xcv"].append(time_call(step, ours))
    return {k: statistics.median(v) for k, v in times.items()}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--target-length", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per sentence")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-greedy", action="store_true", help="skip the greedy-search row")
    parser.add_argument(
        "--results", default=str(results_file.RESULTS / "translation.md"), help="where the table goes ('' for nowhere)"
    )
    return parser.parse_args()


def check_agreement(theirs, ours, input_ids, attention_mask, labels) -> tuple[float, float]:
    """Max |delta logits| and |delta loss| on the benchmark batch; stops when they are not the same computation."""
    with torch.no_grad():
        a = theirs(input_ids, attention_mask=attention_mask, labels=labels)
        b = ours(input_ids, attention_mask=attention_mask, labels=labels)
    delta = (a.logits - b.logits).abs().max().item()
    loss_delta = abs(a.loss.item() - b.loss.item())
    if delta > 1e-4 or loss_delta > 1e-4:
        raise SystemExit(f"the two models disagree: max |delta logits| = {delta:.2e}, |delta loss| = {loss_delta:.2e}")
    return delta, loss_delta


def generation_row(name: str, beams: int, theirs, ours, input_ids, attention_mask, args) -> tuple[str, dict, str]:
    """Time ``generate`` with exactly ``--new-tokens`` new tokens; also say whether both produced the same ids."""
    settings = dict(
        attention_mask=attention_mask,
        num_beams=beams,
        do_sample=False,
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
    )
    outputs = {}

    def generate(model):
        with torch.no_grad():
            outputs[model] = model.generate(input_ids, **settings)

    timing = interleaved(generate, theirs, ours, args.repeats)
    lengths = {output.shape[1] for output in outputs.values()}
    if lengths != {1 + args.new_tokens}:  # the start token and exactly --new-tokens tokens
        raise SystemExit(f"{name}: expected {1 + args.new_tokens} tokens per row, got {sorted(lengths)}")
    same = outputs[theirs].shape == outputs[ours].shape and torch.equal(outputs[theirs], outputs[ours])
    label = f"{name} ({beams} beam{'s' if beams > 1 else ''}, {args.new_tokens} new tokens)"
    return label, timing, "yes" if same else "NO"


def training_row(theirs, ours, input_ids, attention_mask, labels, repeats: int) -> tuple[str, dict, str]:
    optimizers = {model: torch.optim.AdamW(model.parameters(), lr=1e-4) for model in (theirs, ours)}

    def train_step(model):
        model.train()
        optimizer = optimizers[model]
        optimizer.zero_grad(set_to_none=True)
        model(input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        optimizer.step()

    return "training step (fwd + bwd + AdamW)", interleaved(train_step, theirs, ours, repeats), "-"


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()  # generation-config notices would interleave with the table
    config, theirs, ours = build_pair(args.vocab)
    input_ids, attention_mask, labels = make_batch(config, args.batch, args.source_length, args.target_length)
    delta, loss_delta = check_agreement(theirs, ours, input_ids, attention_mask, labels)
    searches = [("beam search", args.beams)] + ([] if args.no_greedy else [("greedy search", 1)])
    # Generation first: the training steps change the weights.
    rows = [generation_row(name, beams, theirs, ours, input_ids, attention_mask, args) for name, beams in searches]
    rows.insert(0, training_row(theirs, ours, input_ids, attention_mask, labels, args.repeats))

    params = sum(p.numel() for p in theirs.parameters())
    lines = [
        f"Marian (opus-mt base size, vocab {args.vocab}, {params / 1e6:.1f}M parameters), batch {args.batch}, "
        f"source/target {args.source_length}/{args.target_length} tokens, float32, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, transformers {transformers.__version__}",
        f"same weights: max |delta logits| = {delta:.2e}, |delta loss| = {loss_delta:.2e}; "
        f"median of {args.repeats} interleaved runs",
        "",
        "| pass | transformers (ms) | hf_xcv (ms) | ratio hf_xcv/transformers | same token ids |",
        "|---|---|---|---|---|",
    ]
    for name, timing, same in rows:
        t, o = timing["transformers"], timing["hf_xcv"]
        lines.append(f"| {name} | {1e3 * t:.1f} | {1e3 * o:.1f} | {o / t:.3f} | {same} |")
    print("\n".join(lines))
    results_file.write(args.results, lines)


if __name__ == "__main__":
    main()
