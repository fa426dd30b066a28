"""``BlockCounts``: what one block of documents did (its documents, tokens, windows, errors), summed per run."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass


@dataclass
class BlockCounts:
    """What one block (or, summed with ``add``, a run) did: the block function's counts for the summary."""

    documents: int = 0
    tokens: int = 0
    unknown: int = 0             # tokens the tokenizer mapped to its unknown token
    windows: int = 0             # windows encoded (unique, not found in the --cache store)
    errors: int = 0              # rows with an error (null features)
    windows_requested: int = 0   # windows all features asked for, before de-duplication
    windows_saved: int = 0       # requested - encoded: shared by strategies, or identical token ids
    oom_splits: int = 0          # batches split in two after an out-of-memory error
    fp32_recomputed: int = 0     # windows recomputed in float32 after a non-finite half-precision result
    windows_cached: int = 0      # unique windows taken from the window store (--cache), not encoded

    def add(self, other: BlockCounts) -> None:
        """Add ``other``'s counts to these, field by field."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_json(self) -> str:
        """The counts as a JSON object (the Ray actors send them with their tables)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def of(cls, batch) -> BlockCounts:
        """What one block did: its documents, tokens, rows with errors and, from the encode stage's
        ``counts`` and the dedup stage's plan, its window counts (``batch``: a pipeline.batch.Batch)."""
        docs, plan = batch.docs or [], batch.plan
        counts = dataclasses.replace(batch.counts) if batch.counts is not None else cls()
        counts.documents = batch.rows.num_rows
        counts.tokens = sum(d.n_tokens for d in docs)
        counts.unknown = sum(d.n_unknown for d in docs)
        counts.errors = sum(e is not None for e in batch.errors or [])
        if plan is not None:
            counts.windows_requested, counts.windows_saved = plan.requested, plan.saved
        return counts

    @classmethod
    def from_json(cls, text: str) -> BlockCounts:
        """Inverse of to_json."""
        return cls(**json.loads(text))
