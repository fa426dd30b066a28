"""Memory bounded by the work in flight: a block's model part runs in pieces of at most --block-tokens window
tokens, each written as it comes, and the writer holds at most one row group. Checked by value: the
pieces' bounds and token counts, the rows held by the writer, and the output equal to a run in one piece."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import longbert
from pipeline.output.row_groups import ROW_GROUP_BYTES, RowGroups
from pipeline.pieces import piece_bounds, window_tokens

from conftest import extract_cli, words


@pytest.mark.parametrize("cost, budget, bounds", [
    ([300, 300, 300, 900, 10], 600, [(0, 2), (2, 3), (3, 4), (4, 5)]),   # a document over the budget: alone
    ([1, 2, 3], 6, [(0, 3)]),                                            # within the budget: one piece
    ([1, 2, 3], None, [(0, 3)]),
    ([5, 5, 5, 5], 10, [(0, 2), (2, 4)]),
    ([11, 0, 11], 10, [(0, 2), (2, 3)]),                                 # an empty document joins the piece before
    ([], 10, [(0, 0)]),                                                  # an empty block is one piece
])
def test_piece_bounds_cover_every_row_once_within_the_budget(cost, budget, bounds):
    got = piece_bounds(np.asarray(cost, dtype=np.int64), budget)
    assert got == bounds
    assert [i for a, b in got for i in range(a, b)] == list(range(len(cost)))


def test_window_tokens_count_each_documents_window_positions(pipe):
    """chunk windows of 14 content tokens (max_length 16): a document of 30 tokens makes 3 windows,
    14 + 14 + 2 content tokens, each with [CLS] and [SEP]."""
    batch = pipe.prepare(longbert.Batch.from_texts([words(30), words(5), ""]))
    assert window_tokens(batch).tolist() == [30 + 3 * 2, 5 + 2, 0]


def test_each_piece_stays_within_its_budget_and_the_pieces_hold_every_row_once(pipe):
    texts = [words(10 + 7 * i, i) for i in range(9)]
    cost = window_tokens(pipe.prepare(longbert.Batch.from_texts(texts)))
    budget = 60
    seen, sizes = [], []
    for item, piece, last in pipe.map_pieces([longbert.Batch.from_texts(texts, ids=[f"d{i}" for i in range(9)])],
                                             max_tokens=budget):
        seen += piece.table.column("id").to_pylist()
        sizes.append(len(piece))
        held = int(cost[len(seen) - len(piece):len(seen)].sum())
        assert held <= budget or len(piece) == 1, (held, len(piece))
    assert seen == [f"d{i}" for i in range(9)] and len(sizes) > 2   # in order, every row once, in several pieces


def test_pieces_give_the_vectors_of_one_piece(pipe):
    texts = [words(10 + 13 * i, i) for i in range(7)]
    whole = pipe(longbert.Batch.from_texts(texts))
    parts = [p.table for _, p, _ in pipe.map_pieces([longbert.Batch.from_texts(texts)], max_tokens=40)]
    assert len(parts) > 2
    pieced = pa.concat_tables(parts)
    assert pieced.column("row").to_pylist() == list(range(7))
    np.testing.assert_allclose(np.array(pieced.column("features").to_pylist()),
                               np.array(whole.column("features").to_pylist()), atol=1e-6)
    assert pieced.column("n_windows").to_pylist() == whole.column("n_windows").to_pylist()


def test_the_writer_holds_at_most_one_row_group(tmp_path):
    """Pieces smaller than a row group are held until they make one (or the block ends); a large piece
    is written at once: never more than one row group plus the piece that completes it is held."""
    n = ROW_GROUP_BYTES // 8 // 4     # int64 rows of a quarter of a row group
    table = pa.table({"x": pa.array(np.arange(n, dtype=np.int64))})
    groups = RowGroups()
    with pq.ParquetWriter(tmp_path / "t.parquet", table.schema) as writer:
        for last in (False, False, False, False, False, True):   # 6 quarter pieces of one block
            groups.add(writer, table, last)
            assert groups.held_bytes < ROW_GROUP_BYTES
        big = pa.table({"x": pa.array(np.arange(5 * n, dtype=np.int64))})
        groups.add(writer, big, False)                         # the next block's first piece: written at once
        assert groups.held == []
        groups.add(writer, table, True)
    meta = pq.read_metadata(tmp_path / "t.parquet")
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [4 * n, 2 * n, 5 * n, n]
    assert groups.peak_bytes <= 5 * table.nbytes


@pytest.mark.parametrize("level", ["token", "document", "window"])
def test_a_run_in_pieces_writes_what_one_piece_writes(tmp_path, tiny_model_dir, level):
    """--block-tokens 512 cuts each block of 6 documents of 300-500 tokens into pieces of one or two:
    the same rows, ids and vectors (token vectors too) as a block held whole, in one file and in parts."""
    texts = [words(300 + 40 * i, i) for i in range(6)]
    common = ["--strategy", "chunk", "--max-length", "64", "--level", level, "--block-rows", "6"]
    _, whole = extract_cli(tmp_path, texts, *common, "--block-tokens", "100000", model=tiny_model_dir, name="w.parquet")
    result, pieced = extract_cli(tmp_path, texts, *common, "--block-tokens", "512", model=tiny_model_dir,
                                 name="p.parquet")
    _, parts = extract_cli(tmp_path, texts, *common, "--block-tokens", "512", model=tiny_model_dir, name="parts/")
    a, b, c = pq.read_table(whole), pq.read_table(pieced), pq.read_table(parts)
    assert a.column_names == b.column_names == c.column_names and a.num_rows == b.num_rows == c.num_rows
    for col in ("features", *(["token_features"] if level == "token" else [])):
        x = a.column(col).to_pylist()
        for other in (b, c):
            for u, v in zip(x, other.column(col).to_pylist()):   # per document: (D,), or (m, D) token vectors
                np.testing.assert_allclose(np.array(u), np.array(v), atol=1e-6)
    for col in a.column_names:
        if "features" not in col:
            assert a.column(col).to_pylist() == b.column(col).to_pylist() == c.column(col).to_pylist(), col
    assert "peak memory" in result.output and " GB -> " in result.output


def test_block_tokens_below_one_window_is_refused(tmp_path, tiny_model_dir):
    result, _ = extract_cli(tmp_path, ["a b"], "--block-tokens", "100", model=tiny_model_dir, ok=False)
    assert result.exit_code == 2
    assert "--block-tokens=100 must be >= 512 (one window)" in result.output


def test_vector_columns_are_written_without_a_dictionary(tmp_path, tiny_model_dir):
    """The writer hashes every value of a dictionary column and holds a 4-byte index per value: vector
    columns (float32 values, int8 ones, the offsets' pairs) are written plain, the others (ids, token ids,
    positions) keep their dictionary."""
    _, out = extract_cli(tmp_path, [words(40), words(7, 3)], "--level", "token", "--max-length", "16",
                         "--out-dtype", "int8", model=tiny_model_dir)
    group = pq.read_metadata(out).row_group(0)
    has_dictionary = {group.column(i).path_in_schema: group.column(i).has_dictionary_page
                      for i in range(group.num_columns)}
    plain = {"features_scale", "token_features_scale.list.element",   # int8: one float32 scale per vector
             "features.list.element", "token_features.list.element.list.element", "offsets.list.element.list.element"}
    assert {p for p, d in has_dictionary.items() if d} == {
        "row", "n_tokens", "n_unknown", "n_windows", "error", "token_ids.list.element", "positions.list.element"}
    assert not any(has_dictionary[p] for p in plain)


@pytest.mark.parametrize("level", ["document", "token"])
def test_encode_in_pieces_gives_each_text_its_own_vectors(tiny_model_dir, level):
    """longbert.encode runs each block in pieces too: every text's vector at its own position."""
    texts = [words(300 + 40 * i, i) for i in range(5)]
    options = dict(model=str(tiny_model_dir), strategy="chunk", max_length=64, level=level)
    whole = longbert.encode(texts, block_tokens=100000, **options)
    pieced = longbert.encode(texts, block_tokens=512, **options)
    if level == "token":
        assert len(pieced) == len(whole) == 5
        for u, v in zip(whole, pieced):
            np.testing.assert_allclose(u, v, atol=1e-6)
    else:
        assert pieced.shape == whole.shape == (5, 32)
        np.testing.assert_allclose(pieced, whole, atol=1e-6)


def test_token_vectors_are_held_once_from_aggregate_to_the_table(tiny_model_dir):
    """At --level token each document's token vectors are rows of one block array, the window token vectors
    are dropped once they are made, and the output table's token_features is that array, not a copy;
    every vector equals the max-context rule computed here from the encode stage's window vectors."""
    from pipeline.model.late import max_context

    tok = longbert.Pipeline.from_options(model=str(tiny_model_dir), strategy="sliding", max_length=16, overlap=4,
                                         level="token")
    texts = [words(40, 1), words(9, 2), "", words(23, 3)]
    encoded = tok.process(tok.prepare(longbert.Batch.from_texts(texts)), tok.split, tok.names.index("aggregate"))
    out = tok.process(encoded, tok.names.index("aggregate"))
    assert out.encoded.tokens is None                                       # the windows' copies are dropped
    held = [t[3] for t in out.tokens if t is not None]
    base = held[0].base
    assert all(x.base is base for x in held) and sum(x.nbytes for x in held) == base.nbytes
    column = out.table.column("token_features")
    assert column.num_chunks == 1
    leaf = column.chunk(0).values.values                                      # float32 leaf of list<fsl<f32>>
    assert np.shares_memory(np.asarray(leaf), base)                           # handed to Arrow without a copy
    windows = encoded.windows["sliding"]
    into = encoded.into_unique("sliding")
    for doc, t in enumerate(out.tokens):
        mine = [i for i, w in enumerate(windows) if w.doc == doc]
        if not mine:
            assert t is None or len(t[1]) == 0
            continue
        positions, want = max_context([windows[i].positions for i in mine],
                                      [encoded.encoded.tokens[into[i]] for i in mine])
        assert t[1].tolist() == positions.tolist()
        np.testing.assert_array_equal(t[3], want)


def test_token_rows_that_do_not_tile_one_array_are_copied():
    from pipeline.output.arrow_arrays import tiled_buffer

    flat = np.arange(12, dtype=np.float32).reshape(6, 2)
    assert np.shares_memory(tiled_buffer([flat[:2], None, flat[2:]], np.float32), flat)
    assert tiled_buffer([flat[:2], flat[3:]], np.float32) is None          # a gap: a row left unused
    assert tiled_buffer([flat[:2], flat[2:5]], np.float32) is None         # the array's end unused
    assert tiled_buffer([flat[2:], flat[:2]], np.float32) is None          # out of order
    assert tiled_buffer([flat[:2], flat[2:]], np.float16) is None          # another dtype: converted
    assert tiled_buffer([np.ones((2, 2), np.float32)], np.float32) is None  # not a view
