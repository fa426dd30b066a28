"""Per-token vectors of a window in the SQLite window store (``--cache``): what a late chunk needs; the
``get_tokens``/``put_tokens`` of pipeline.cache.store.WindowStore (``TokenRows``). An entry is keyed like a pooled
window vector (pipeline.cache.store_keys.window_key: a pool key and the window's exact token ids) and lives in
the same table, so ``longbert cache`` counts and clears it with the rest; its pool key names one
hidden layer's token vectors (``["tokens", layer]``), registered with dim = hidden. The entry holds the
window's content-token vectors of that layer, (n_content, hidden) float32 row by row, with n_content =
len(ids) - 2; its ``dim`` column holds n_content x hidden. Because the key is the window, not the
document, a later run with another --chunk-tokens, --aggregate or pooling reads the same entries.
An entry whose length or CRC-32 does not verify is a miss (the window is encoded again and replaced).
"""
from __future__ import annotations

import numpy as np

from .store_keys import checksum, verifies, window_keys


class TokenRows:
    """The token-vector methods of the SQLite store, on its row methods (``registration``, ``read_rows``,
    ``count_lookups``, ``write_rows``): a mix-in of pipeline.cache.store.WindowStore."""

    def get_tokens(self, pool: str, ids_list: list) -> list[np.ndarray | None]:
        """Each window's stored (len(ids) - 2, hidden) float32 token vectors, or None (absent, or not verifying).

        Args:
            pool: a pool key registered with dim = hidden (WindowStore.register).
            ids_list: each window's token ids ([CLS] ... [SEP], 1-D integer arrays).

        Raises:
            ValueError: ``pool`` not registered. RunError: the database failed (pipeline.cache.store).
        """
        model_id, hidden = self.registration(pool)
        keys = window_keys(pool, ids_list)
        rows = self.read_rows(keys)
        out: list[np.ndarray | None] = []
        rejected = 0
        for key, ids in zip(keys, ids_list):
            row, n = rows.get(key), (len(ids) - 2) * hidden
            if row is not None and not verifies(key, row, n):
                rejected, row = rejected + 1, None
            out.append(None if row is None else
                       np.frombuffer(row[2], dtype="<f4").astype(np.float32).reshape(-1, hidden))  # (n_content, hidden)
        self.count_lookups(model_id, len(keys), sum(v is not None for v in out), rejected)
        return out

    def put_tokens(self, pool: str, ids_list: list, tokens: list[np.ndarray]) -> int:
        """Store each window's (len(ids) - 2, hidden) token vectors, all in one transaction.

        Returns:
            The number of entries written. Raises ValueError: a shape that is not (len(ids) - 2, hidden).
        """
        model_id, hidden = self.registration(pool)
        rows = []
        for key, ids, mat in zip(window_keys(pool, ids_list), ids_list, tokens):
            if mat.shape != (len(ids) - 2, hidden):
                raise ValueError(f"token vectors must be ({len(ids) - 2}, {hidden}), got {mat.shape}")
            data = np.ascontiguousarray(mat, dtype="<f4").tobytes()
            rows.append((key, model_id, mat.size, checksum(key, data), data))
        self.write_rows(rows)
        return len(rows)
