"""The window store interface (pipeline.cache.store_api.Store): a second, dict-backed store plugs into a
pipeline and gives what the SQLite store gives; the keys the SQLite file holds are store_keys' keys."""
from __future__ import annotations

import hashlib
import json
import sqlite3

import numpy as np
import pyarrow as pa
import pytest
from conftest import words

import longbert
from pipeline.cache.store import DB_NAME, WindowStore
from pipeline.cache.store_api import Store
from pipeline.cache.store_keys import KEY_FORMAT, token_layer_key, vector_key, window_key
from pipeline.model.checkpoint import model_sha256
from pipeline.model.facts import model_facts
from pipeline.options.config import PipelineConfig
from pipeline.options.python_api import config_from_python
from pipeline.text.segment import segment
from pipeline.text.tokenize import tokenize_block

ML = 16   # max_length: chunk windows of 14 content tokens
# chunk windows: words(30) -> 14 + 14 + 2 tokens, words(5, 3) -> 5, words(12, 7) -> 12: 5 distinct windows
TEXTS = [words(30), words(5, 3), words(12, 7)]
N_WINDOWS = 5


class DictStore:
    """A Store in a dict: {window_key: float32 array}; counts per the test's own reading of the contract."""

    def __init__(self):
        self.dims: dict[str, int] = {}
        self.entries: dict[bytes, np.ndarray] = {}
        self.lookups = self.hits = 0

    def register(self, pool, dim, label):
        self.dims[pool] = int(dim)

    def _get(self, pool, ids_list, shape_of):
        if pool not in self.dims:
            raise ValueError(pool)
        out = []
        for ids in ids_list:
            vec = self.entries.get(window_key(pool, ids))
            out.append(None if vec is None or vec.shape != shape_of(ids) else vec.copy())
        self.lookups += len(out)
        self.hits += sum(v is not None for v in out)
        return out

    def _put(self, pool, ids_list, vectors, shape_of):
        for ids, vec in zip(ids_list, vectors):
            if np.shape(vec) != shape_of(ids):
                raise ValueError(np.shape(vec))
        self.entries.update((window_key(pool, ids), np.asarray(v, dtype=np.float32).copy())
                            for ids, v in zip(ids_list, vectors))
        return len(ids_list)

    def get_many(self, pool, ids_list):
        return self._get(pool, ids_list, lambda ids: (self.dims[pool],))

    def put_many(self, pool, ids_list, vectors):
        return self._put(pool, ids_list, vectors, lambda ids: (self.dims[pool],))

    def get_tokens(self, pool, ids_list):
        return self._get(pool, ids_list, lambda ids: (len(ids) - 2, self.dims[pool]))

    def put_tokens(self, pool, ids_list, tokens):
        return self._put(pool, ids_list, tokens, lambda ids: (len(ids) - 2, self.dims[pool]))

    def stats(self):
        return {"entries": len(self.entries), "lookups": self.lookups, "hits": self.hits, "rejected": 0,
                "hit_rate": self.hits / self.lookups if self.lookups else None}

    def clear(self):
        self.entries, self.lookups, self.hits = {}, 0, 0

    def close(self):
        pass


def _run(store, options: dict) -> np.ndarray:
    pipe = longbert.Pipeline.from_config(config_from_python(**options), store=store)
    table = pipe(longbert.Batch.from_texts(TEXTS))
    vector_columns = [f.name for f in table.schema if pa.types.is_list(f.type) or pa.types.is_fixed_size_list(f.type)]
    assert len(vector_columns) == len(options["feature"])
    return np.hstack([np.asarray(table.column(c).to_pylist(), np.float32) for c in vector_columns])  # (n_docs, sum dims)


def test_both_stores_implement_the_protocol():
    assert isinstance(DictStore(), Store)
    with WindowStore.open(None) as sqlite_store:
        assert isinstance(sqlite_store, Store)
    assert not isinstance(object(), Store)


def test_an_object_without_the_token_methods_is_refused_naming_them(tiny_model_dir):
    class Pooled(DictStore):
        get_tokens = put_tokens = None

    pipe = longbert.Pipeline.from_config(config_from_python(model=str(tiny_model_dir), max_length=ML), store=Pooled())
    with pytest.raises(longbert.ConfigError) as err:
        pipe(longbert.Batch.from_texts(TEXTS))
    assert str(err.value).startswith("store=Pooled lacks get_tokens, put_tokens; a window store needs register, ")


@pytest.mark.parametrize("feature, pools", [
    (("chunk:mean",), 1),                  # one pooled vector per window
    (("chunk:mean", "chunk:cls"), 2),      # two pooled vectors per window, one pool key each
    (("late:mean", "chunk:max"), None),    # pooled vectors, and the last layer's token vectors of late's windows
])
def test_a_dict_store_gives_the_sqlite_stores_vectors_and_hits(tiny_model_dir, tmp_path, feature, pools):
    options = dict(model=str(tiny_model_dir), feature=feature, max_length=ML, overlap=4)
    plain = _run(None, options)
    mine, sqlite_store = DictStore(), WindowStore.open(tmp_path / "store")
    first = {"dict": _run(mine, options), "sqlite": _run(sqlite_store, options)}
    cold = {"dict": mine.stats(), "sqlite": sqlite_store.stats()}
    second = {"dict": _run(mine, options), "sqlite": _run(sqlite_store, options)}
    warm = {"dict": mine.stats(), "sqlite": sqlite_store.stats()}
    for name in ("dict", "sqlite"):
        np.testing.assert_allclose(first[name], plain, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(second[name], first[name])   # the second run read every window back
        assert cold[name]["hits"] == 0 and cold[name]["lookups"] == warm[name]["hits"]
        assert warm[name]["lookups"] == 2 * cold[name]["lookups"]
    assert {k: warm["dict"][k] for k in ("lookups", "hits")} == {k: warm["sqlite"][k] for k in ("lookups", "hits")}
    assert mine.stats()["entries"] == sqlite_store.stats()["entries"]
    if pools is not None:   # each distinct window looked up once per pool key, then stored
        assert cold["dict"]["lookups"] == mine.stats()["entries"] == N_WINDOWS * pools
    sqlite_store.close()


def _late_windows(model_dir) -> list[np.ndarray]:
    """The windows late chunking encodes (its sliding windows), from longbert's tokenizer and segmenter."""
    cfg = PipelineConfig.from_options(model=str(model_dir), strategy="late", max_length=ML, overlap=4)
    facts, tok = model_facts(cfg.model)
    return [w.input_ids for d in tokenize_block(TEXTS, tok, None) for w in segment(d, cfg.segment, facts.cls_id,
                                                                                     facts.sep_id)]


def test_the_keys_in_the_sqlite_file_are_store_keys_keys(tiny_model_dir, tmp_path, tiny_bert):
    options = dict(model=str(tiny_model_dir), feature=("late:mean", "chunk:max"), max_length=ML, overlap=4,
                   cache=str(tmp_path / "store"))
    _run(None, options)
    sha = model_sha256(tiny_model_dir)
    with sqlite3.connect(tmp_path / "store" / DB_NAME) as conn:
        pools = [key for (key,) in conn.execute("SELECT pool_key FROM models ORDER BY id")]
        stored = {bytes(k) for (k,) in conn.execute("SELECT key FROM windows")}
    vecs = [vector_key(sha, "float32", "none", p, (-1,), "mean", 2) for p in ("mean", "max")]  # 2 layers
    tokens = token_layer_key(sha, "float32", "none", 2)                 # late:mean reads layer -1 = 2
    assert vecs[1] == hashlib.sha256(json.dumps([KEY_FORMAT, sha, "float32", "none", '["max", [2], null]'])
                                     .encode()).hexdigest()
    assert tokens == hashlib.sha256(json.dumps([KEY_FORMAT, sha, "float32", "none", '["tokens", 2]'])
                                    .encode()).hexdigest()
    assert sorted(pools) == sorted([*vecs, tokens])
    _, tok = tiny_bert
    content = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    chunk = [np.array([2, *ids[i:i + ML - 2], 3]) for ids in content for i in range(0, len(ids), ML - 2)]  # [CLS]=2
    late = _late_windows(tiny_model_dir)
    # every encoded window's pooled vectors go under each pooled key; late's windows' token vectors under tokens
    want = {hashlib.sha256(v.encode() + w.astype("<i8").tobytes()).digest() for v in vecs for w in chunk + late}
    want |= {hashlib.sha256(tokens.encode() + w.astype("<i8").tobytes()).digest() for w in late}
    assert stored == want
    assert stored == {window_key(v, w) for v in vecs for w in chunk + late} | {window_key(tokens, w) for w in late}


def test_the_summary_counts_windows_served_by_a_store_of_ones_own(tiny_model_dir, tmp_path):
    """A user's store passed to the pipeline: the second run encodes nothing and the summary says that its
    windows came from the store (counted by the store itself), as --cache's does."""
    corpus = tmp_path / "c.csv"
    corpus.write_text("text\n" + "\n".join(TEXTS) + "\n")
    mine = DictStore()
    pipe = longbert.Pipeline.from_config(config_from_python(model=str(tiny_model_dir), max_length=ML, strategy="chunk"),
                                         store=mine)
    first = pipe.run(str(corpus), str(tmp_path / "a.parquet"))
    assert f"{N_WINDOWS} windows encoded, 0 from the cache," in first.line()
    second = pipe.run(str(corpus), str(tmp_path / "b.parquet"))
    assert mine.stats()["hits"] == N_WINDOWS                             # the store's own count of what it served
    assert f"3 documents, 47 tokens, 0 windows encoded, {N_WINDOWS} from the cache," in second.line()
