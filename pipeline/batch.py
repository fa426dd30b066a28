"""``Batch``: one block of documents as it moves through the stages; ``take`` keeps some of its rows.

Each stage takes a Batch and returns a new one with its own fields filled; nothing else passes
between stages. Built by ``longbert.read`` (from inputs), ``Batch.from_texts`` (from Python) or the
engines (from a block that ``pipeline.read.read_block`` returned).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .errors import InputError
from .plan import WindowPlan, plan_windows
from .texts import as_texts
from .types import TokenizedDoc, Window


@dataclass(frozen=True)
class Batch:
    """One block of documents and what the stages made of it.

    Fields, by the stage that fills them:
        rows: the input rows: ``id`` (int64 row numbers or string ids), ``text`` (string) and the kept
            columns, one row per document, in input order (``read`` / ``from_texts``).
        docs: ``tokenize``: one pipeline.types.TokenizedDoc per row (content ids, offsets, counts, error).
        windows: ``segment``: strategy -> that strategy's windows (pipeline.types.Window: document row,
            spans of content-token positions, input ids with the model's specials), grouped by document
            in row order.
        plan: ``dedup``: pipeline.plan.WindowPlan: the unique windows and, per strategy, the index of
            each requested window into them.
        encoded: ``encode``: pipeline.model.encode.Encoded of ``unique``: vectors (n_unique, D) float32 (every
            pooling of the run side by side), ``finite``, and per-window token vectors at --level token.
        cached: ``encode``: how many of ``unique`` came from the window store instead of the model.
        vectors: ``aggregate``: output column -> (n_out, D) float32, one row per output row (a document,
            or at --level window a window); rows that are not ``valid`` hold zeros.
        valid: ``aggregate``: (n_out,) bool. errors: ``aggregate``: per output row, why it has no vector.
        out_docs: ``aggregate``: (n_out,) int64, the document row of each output row.
        out_windows: ``aggregate`` at --level window: the window of each output row (None: no window).
        n_windows, truncated: ``aggregate`` at document/token level: per document, the distinct windows
            its features used, and whether some content token was in none of them.
        tokens: ``aggregate`` at --level token: per document (token_ids, positions, offsets, vectors) or None.
        table: ``rows``: the output rows, the schema ``longbert extract`` writes.
        counts: ``rows``: the block's pipeline.counts.BlockCounts.
        dropped: Pipeline.process: stage name -> the rows that stage dropped (a filter's ``take``); None: none.

    Example:
        >>> b = Batch.from_texts(["a long report", "a memo"], ids=["r1", "m7"], lang=["en", "en"])
        >>> b.texts, b.ids
        (['a long report', 'a memo'], ['r1', 'm7'])
    """

    rows: pa.Table
    docs: list[TokenizedDoc] | None = None
    windows: dict[str, list[Window]] | None = None
    plan: WindowPlan | None = None         # ``dedup``'s: the unique windows, and each strategy's index into them
    encoded: Any = None                    # pipeline.model.encode.Encoded (imports torch)
    cached: int = 0
    vectors: dict[str, np.ndarray] | None = None
    valid: np.ndarray | None = None
    errors: list[str | None] | None = None
    out_docs: np.ndarray | None = None
    out_windows: list[Window | None] | None = None
    n_windows: np.ndarray | None = None
    truncated: np.ndarray | None = None
    tokens: list[tuple | None] | None = None
    table: pa.Table | None = None
    counts: Any = None                     # pipeline.counts.BlockCounts
    dropped: dict[str, int] | None = None  # stage name -> rows it dropped from this block (with_dropped)

    @classmethod
    def from_texts(cls, texts: Sequence[str] | Any, ids: Sequence[Any] | None = None, **columns: Sequence[Any]) -> Batch:
        """A batch from Python: a list, tuple, numpy array or pandas Series of str.

        Args:
            texts: n documents (str each).
            ids: n ids, kept as strings (None: row numbers 0..n-1, written as the ``row`` column).
            **columns: kept columns, n values each, written as strings (None stays null).

        Raises:
            TextsTypeError: ``texts`` is not one of those kinds (a bare string: "a list of texts was
                expected"). TextError: a text is not a str. InputError: ids / a column has another length.
        """
        items = as_texts(texts, "Batch.from_texts")
        n = len(items)
        cols: dict[str, pa.Array] = {}
        if ids is None:
            cols["id"] = pa.array(range(n), type=pa.int64())
        else:
            cols["id"] = pa.array([str(i) for i in _sized(ids, n, "ids")], type=pa.string())
        cols["text"] = pa.array(items, type=pa.string())
        for name, values in columns.items():
            if name in ("id", "text", "error"):   # "error": the reader's row errors travel in that column
                raise InputError(f"column {name!r} is the batch's own; give ids with ids= and texts first, and "
                                 "name a kept column other than id, text or error")
            cols[name] = pa.array([None if v is None else str(v) for v in _sized(values, n, name)], type=pa.string())
        return cls(rows=pa.table(cols))

    def with_texts(self, texts: Sequence[str] | Any) -> Batch:
        """A copy whose texts are replaced (for a cleaning step before ``tokenize``); ids and kept
        columns stay, and every field a stage filled is cleared.

        Raises:
            TextsTypeError / TextError: as from_texts. InputError: not one text per row.
        """
        items = as_texts(texts, "Batch.with_texts")
        _sized(items, self.rows.num_rows, "texts")
        i = self.rows.column_names.index("text")
        return Batch(rows=self.rows.set_column(i, "text", pa.array(items, type=pa.string())))

    @property
    def texts(self) -> list[str]:
        """The documents' texts, in row order."""
        return self.rows.column("text").to_pylist()

    @property
    def ids(self) -> list:
        """The documents' ids (int row numbers, or str), in row order."""
        return self.rows.column("id").to_pylist()

    @property
    def unique(self) -> list[Window]:
        """The windows the model runs on (``dedup``): each distinct window once; [] before ``dedup``."""
        return [] if self.plan is None else self.plan.unique

    def into_unique(self, strategy: str) -> np.ndarray:
        """int64 (n windows of ``strategy``,): each of that strategy's windows' position in ``unique``
        (after ``dedup``). Example: head and chunk sharing their first window -> head [0], chunk [0, 1]."""
        return np.asarray(self.plan.index[list(self.windows).index(strategy)], dtype=np.int64)

    def __len__(self) -> int:
        return self.rows.num_rows

    def take(self, positions: Sequence[int] | np.ndarray) -> Batch:
        """A batch of the rows at ``positions``, in that order, every filled field cut to match: the
        documents and windows renumbered, the window plan made again for the kept windows (as the
        dedup stage makes it) and the encoded vectors, aggregated vectors and table taken to match.
        The stages after a filter then give exactly what a run over those documents alone gives.

        Args:
            positions: distinct row positions, 0 <= p < len(self). Example: a batch of 4 rows,
                take([3, 1]) -> rows 3 and 1; a document that was row 3 is now row 0.

        Raises:
            ConfigError: a position out of range or repeated, or a field that cannot be cut (named).
        """
        from .errors import ConfigError

        pos = np.asarray(list(positions) if not isinstance(positions, np.ndarray) else positions)
        if pos.size and not np.issubdtype(pos.dtype, np.integer):
            raise ConfigError(f"take() wants row positions (int), got {pos.dtype}; e.g. batch.take([0, 2])")
        pos = pos.astype(np.int64).reshape(-1)
        n = len(self)
        if pos.size and (pos.min() < 0 or pos.max() >= n):
            raise ConfigError(f"take(): positions must be in [0, {n}), got {sorted(set(pos[(pos < 0) | (pos >= n)].tolist()))}")
        if len(np.unique(pos)) != len(pos):
            raise ConfigError("take(): a position is repeated; each row can be kept once")
        new_row = np.full(n, -1, dtype=np.int64)
        new_row[pos] = np.arange(len(pos))
        fields: dict[str, Any] = {"rows": self.rows.take(pa.array(pos, type=pa.int64()))}
        if self.docs is not None:
            fields["docs"] = [dataclasses.replace(self.docs[p], row=i) for i, p in enumerate(pos)]
        kept: dict[str, np.ndarray] = {}
        if self.windows is not None:
            windows = {}
            for s, ws in self.windows.items():
                keep = [j for j, w in enumerate(ws) if new_row[w.doc] >= 0]
                keep.sort(key=lambda j: new_row[ws[j].doc])       # stable: each document's windows stay in order
                kept[s] = np.asarray(keep, dtype=np.int64)
                windows[s] = [dataclasses.replace(ws[j], doc=int(new_row[ws[j].doc])) for j in keep]
            fields["windows"] = windows
        if self.plan is not None:
            fields.update(_take_plan(self, fields["windows"], kept))
        fields.update(_take_outputs(self, new_row))
        return dataclasses.replace(self, **fields)

    def replace(self, **fields: Any) -> Batch:
        """A copy with ``fields`` set (what a stage returns)."""
        return dataclasses.replace(self, **fields)


def with_dropped(before: Batch, after: Batch, stage: str) -> Batch:
    """``after`` with the rows ``stage`` dropped from ``before`` counted under its name in ``dropped``
    (the counts ``before`` had carried on). Example: a filter keeping 9 of 10 rows -> {"my_filter": 1}."""
    counts = dict(before.dropped or {})
    counts.update(after.dropped or {})
    lost = len(before) - len(after)
    if lost > 0:
        counts[stage] = counts.get(stage, 0) + lost
    if counts == (after.dropped or {}):
        return after
    return after.replace(dropped=counts)


def _take_plan(batch: Batch, windows: dict[str, list[Window]], kept: dict[str, np.ndarray]) -> dict[str, Any]:
    """The plan of the kept windows (made again) and, after encode, the encoded rows it points at."""
    plan = plan_windows(list(windows.values()))
    fields: dict[str, Any] = {"plan": plan}
    if batch.encoded is not None:
        old = np.zeros(len(plan.unique), dtype=np.int64)          # new unique window -> old unique window
        for new_index, old_index, keep in zip(plan.index, batch.plan.index, kept.values()):
            old[new_index] = np.asarray(old_index, dtype=np.int64)[keep]
        enc = batch.encoded
        fields["encoded"] = dataclasses.replace(
            enc, vectors=enc.vectors[old], finite=enc.finite[old],
            **{name: [getattr(enc, name)[i] for i in old] for name in ("tokens", "layers")
               if getattr(enc, name, None) is not None})
    return fields


def _take_outputs(batch: Batch, new_row: np.ndarray) -> dict[str, Any]:
    """The aggregate and rows stages' fields for the kept documents: the output rows whose document is
    kept, in the new document order."""
    from .errors import ConfigError

    if batch.vectors is None and batch.table is None:
        return {}
    out_docs = batch.out_docs if batch.out_docs is not None else np.arange(len(batch), dtype=np.int64)
    sel = np.flatnonzero(new_row[out_docs] >= 0)
    sel = sel[np.argsort(new_row[out_docs[sel]], kind="stable")]                  # output rows kept, new order
    fields: dict[str, Any] = {"out_docs": new_row[out_docs[sel]]} if batch.out_docs is not None else {}
    per_out = {"valid": batch.valid, "errors": batch.errors, "out_windows": batch.out_windows}
    per_doc = {"n_windows": batch.n_windows, "truncated": batch.truncated, "tokens": batch.tokens}
    if batch.out_windows is not None and any(v is not None for v in per_doc.values()):
        raise ConfigError("take(): n_windows/truncated/tokens with one row per window cannot be cut; "
                          "filter before 'aggregate'")
    doc_sel = sel if batch.out_windows is None else None
    for name, values in {**per_out, **(per_doc if doc_sel is not None else {})}.items():
        if values is not None:
            fields[name] = values[sel] if isinstance(values, np.ndarray) else [values[i] for i in sel]
    if batch.vectors is not None:
        for name, v in batch.vectors.items():
            if len(v) != len(out_docs):
                raise ConfigError(f"take(): vectors[{name!r}] has {len(v)} rows for {len(out_docs)} output rows; "
                                  "it cannot be cut")
        fields["vectors"] = {name: np.asarray(v)[sel] for name, v in batch.vectors.items()}
    if batch.table is not None:
        if batch.table.num_rows != len(out_docs):
            raise ConfigError(f"take(): the table has {batch.table.num_rows} rows for {len(out_docs)} output "
                              "rows; it cannot be cut")
        fields["table"] = batch.table.take(pa.array(sel, type=pa.int64()))
    return fields


def _sized(values: Any, n: int, what: str) -> list:
    items = list(values)
    if len(items) != n:
        raise InputError(f"{what} has {len(items)} values for {n} texts; give one per text")
    return items
