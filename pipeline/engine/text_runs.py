"""``Pipeline.run_texts``: a run over texts a Python program holds or generates (a list, a generator, a database
cursor), in bounded memory: the texts are written one by one to a JSON Lines file in a temporary folder, which
the run then reads block by block as ``Pipeline.run`` reads any input (the same block loop, the same output
as a file of the same texts). The Pipeline class takes the method from ``TextRuns``.
"""
from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError

ID, TEXT = "id", "text"   # the spooled file's columns
# Options that name an input's columns or its place: the texts come from this call, not from a file.
INPUT_OPTIONS = ("text_col", "id_col", "keep_cols", "with_source", "resume", "format", "encoding", "delimiter",
                 "on_bad_lines")


def spool(texts: Iterable[Any], path: Path) -> bool:
    """Write ``texts`` to ``path`` as JSON Lines, one {"text": t} (or {"id": str(id), "text": t}) a line, reading
    the iterable once, one item at a time. Returns whether the items were (id, text) pairs.

    Raises:
        TypeError: an item that is neither a str nor an (id, text) pair with a str text, or pairs and texts
            mixed (naming the item's index and type).
        InputError: a text holding a character UTF-8 cannot encode (a lone surrogate), naming its index.
    """
    pairs = None
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for i, item in enumerate(texts):
            is_pair = isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], str)
            if not (isinstance(item, str) or is_pair):
                raise TypeError(f"texts[{i}] is {type(item).__name__}; give str texts, or (id, text) pairs "
                                "with str texts")
            if pairs is None:
                pairs = is_pair
            elif pairs != is_pair:
                raise TypeError(f"texts[{i}] is {'an (id, text) pair' if is_pair else 'a str'}, but texts[0] was "
                                f"{'a str' if is_pair else 'an (id, text) pair'}; give all texts one way")
            row = {ID: str(item[0]), TEXT: item[1]} if is_pair else {TEXT: item}
            try:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            except UnicodeEncodeError as err:
                raise InputError(f"texts[{i}] holds a character UTF-8 cannot encode ({err.reason}: "
                                 f"{err.object[err.start:err.end]!r}); remove it from the text") from None
    return bool(pairs)


class TextRuns:
    """The ``run_texts`` method of pipeline.engine.compose.Pipeline (which has ``run``)."""

    def run_texts(self, texts: Iterable[str] | Iterable[tuple[Any, str]], output: str,
                  echo: Callable[[str], None] | None = None, overwrite: bool = False, **options: Any):
        """Run the pipeline over ``texts`` as ``run`` does over a file, in bounded memory: a list or a
        generator of str (the output's ``row`` column numbers them from 0), or of (id, text) pairs (the
        ``id`` column: str(id)). The same output as ``run`` over a CSV of the same texts (a ``text``
        column, and ``id`` for pairs).

        The iterable is read once, one item at a time, into a JSON Lines file in a temporary folder
        (``tempfile``: $TMPDIR; as large as the texts, deleted at the end), which the run reads block by block
        (``block_rows``, ``block_tokens``): memory holds a block, never the corpus.

        Args:
            texts: the texts, or (id, text) pairs. output: a .parquet file or a folder ending in "/".
            echo, overwrite, **options: as ``run`` (``block_rows``, ``progress``...); the options of an
                input's columns or place (``text_col``, ``id_col``, ``keep_cols``, ``with_source``,
                ``resume``...) are refused: the texts are this call's.

        Returns:
            The run's pipeline.engine.run.Summary.

        Raises:
            TypeError: an item that is not a str or an (id, text) pair (naming its index).
            ConfigError: an input option given; as ``run``. InputError: no texts; as ``run``.
            ModelError, RunError: as ``run``.

        Example:
            >>> pipe.run_texts((row.body for row in cursor), "out/f.parquet")
        """
        given = sorted(k for k in options if k in INPUT_OPTIONS)
        if given:
            raise ConfigError(f"run_texts takes the texts themselves, so {', '.join(given)} cannot apply; drop "
                              f"{'it' if len(given) == 1 else 'them'}, or write the texts to a file and call run")
        with tempfile.TemporaryDirectory(prefix="longbert-texts-") as folder:
            path = Path(folder) / "texts.jsonl"
            pairs = spool(texts, path)
            if path.stat().st_size == 0:
                raise InputError("run_texts: texts is empty; give at least one text")
            return self.run(str(path), output, echo, overwrite, text_col=TEXT, id_col=ID if pairs else None,
                            **options)
