"""What `import hf_xcv` costs on top of importing transformers (with PreTrainedModel, hence torch).

    python benchmarks/bench_import.py [--repeats 5]

Each import runs in a fresh interpreter; the best of ``--repeats`` wall times is reported.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import results_file

BASELINE = "import transformers, torch; from transformers import PreTrainedModel, AutoModel, AutoConfig"
HF_XCV = "import hf_xcv"


def best_time(code: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--results", default=str(results_file.RESULTS / "import.md"), help="where the result goes ('' for nowhere)"
    )
    args = parser.parse_args()
    best_time(HF_XCV, 1)  # warm the file cache
    baseline, ours = best_time(BASELINE, args.repeats), best_time(HF_XCV, args.repeats)
    line = f"transformers + torch: {baseline:.2f} s; hf_xcv: {ours:.2f} s; hf_xcv adds {ours - baseline:.2f} s"
    print(line)
    results_file.write(args.results, [f"Best of {args.repeats} fresh interpreters each: {line}"])


if __name__ == "__main__":
    main()
