"""``longbert probe CORPUS``: how well a linear classifier reads the labels off every feature of a raw corpus.
Each feature is extracted in one pass over a stratified sample of the corpus
(``probe_corpus``), then a scikit-learn ``make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))`` is
cross-validated with ``StratifiedKFold(folds, shuffle=True, random_state=seed)``; the same folds for
every feature, so strategies, poolings and layers are compared on equal terms.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..options.config import PipelineConfig
from ..options.features_config import STRATEGIES, Feature, is_late
from ..errors import ConfigError, InputError
from .folds import (LEXICAL_NAME, check_classes, cross_validate_lexical, cross_validate_probe,  # noqa: F401 - re-exported
                    lexical_name, no_terms, one_blas_thread, stratified_sample)
# the report, re-exported: the CLI and tests import them from here
from .probe_ranking import CSV_COLUMNS, extract_command, format_corpus_probe, lexical_summary, write_ranking_csv  # noqa: F401
from .probe_ranking import not_computable, pass_line, reason
from .probe_files import windows_per_doc
from .probe_compact import compact_rows, dims_rows, smallest_within  # noqa: F401 - compact_rows: re-exported
from ..columns import ERROR, N_TOKENS


# ---------------------------------------------------------------------------------------------------
# `longbert probe CORPUS`: every feature from one pass over a stratified sample of the corpus

PROBE_POOLINGS = ("cls", "mean", "max")


def probe_feature_set(n_layers: int, has_pooler: bool) -> tuple[Feature, ...]:
    """Every strategy x {cls, mean, max} x layers {-1, -2, last four averaged}, plus pooler (last
    layer) where the model has one, late without cls and pooler (no window of its own): 51 or 56 features. A model of fewer than 4 layers averages all
    its layers for the third choice, one of 1 layer has no -2 choice.
    """
    last = min(4, n_layers)
    layer_choices = [(-1,)] + ([(-2,)] if n_layers >= 2 else []) + ([tuple(range(-last, 0))] if last >= 2 else [])
    out = []
    for strategy in STRATEGIES:
        for pooling in PROBE_POOLINGS[1:] if is_late(strategy) else PROBE_POOLINGS:  # late: no cls (no window)
            out += [Feature(strategy, pooling, layers, "mean") for layers in layer_choices]
        if has_pooler and not is_late(strategy):
            out.append(Feature(strategy, "pooler"))
    return tuple(out)


def _read_corpus(cfg: PipelineConfig, label_col: str):
    """(texts, labels) of every input row, in input order (pipeline.read: any input format extract
    takes); rows with an empty or null label are dropped (and counted).

    Raises:
        InputError: an unreadable input, or a missing text/label column (as extract's messages).
    """
    import dataclasses

    from ..read import read_block, scan

    if label_col == cfg.read.text_col:
        raise ConfigError(f"--label-col {label_col!r} is the text column; pass the column of the labels")
    read_cfg = dataclasses.replace(cfg.read, keep_cols=(label_col,))
    texts, labels, dropped = [], [], 0
    try:
        specs = scan(read_cfg).blocks
    except InputError as err:  # the label column is read as a kept column: name the flag the user gave
        raise InputError(str(err).replace("pass --keep-col with", "pass --label-col with")) from None
    for spec in specs:
        block = read_block(spec)
        for text, label in zip(block.column("text").to_pylist(), block.column(label_col).to_pylist()):
            if label is None or not str(label).strip():
                dropped += 1
                continue
            texts.append(text)
            labels.append(str(label))
    return texts, np.asarray(labels, dtype=object), dropped


def _sampled_corpus(cfg: PipelineConfig, label_col: str, sample: int, folds: int, seed: int):
    """(texts, labels (str), picked row numbers, dropped labels, rows per class in the corpus) of the
    stratified sample, each class kept at >= folds rows (stratified_sample). Raises InputError as
    check_classes on the whole corpus."""
    texts, labels, dropped = _read_corpus(cfg, label_col)
    check_classes(labels, folds, ", ".join(cfg.read.inputs), label_col)  # the corpus itself
    corpus = dict(zip(*(x.tolist() for x in np.unique(labels.astype(str), return_counts=True))))
    picked = stratified_sample(labels.astype(str), sample, seed, min_per_class=folds)
    return [texts[i] for i in picked], labels[picked].astype(str), picked, dropped, corpus


PROBE_PARTS = ("mean", "first", "last", "max")   # the sample's --aggregate: every variant is a slice of it
# the aggregations ranked for the multi-window strategies, beside the mean (parts in PROBE_PARTS order): each
# part alone and the two concatenations extract users ask for, all slices of the one pass's vectors
PROBE_AGGREGATES = {"mean": (0,), "first": (1,), "last": (2,), "max": (3,), "mean,max": (0, 3),
                    "first,last,mean,max": (1, 2, 0, 3)}
MULTI_WINDOW = ("chunk", "sliding", "late")


def _extract_sample(pipe, texts: list[str], picked: np.ndarray, rows: int, progress: bool):
    """Run the pipeline over the sample (``Pipeline.map``), ``rows`` documents a block, with extract's progress bar.

    Returns:
        ({feature column: (N, k x D) float32, the PROBE_PARTS a feature needs: all four for chunk and
        sliding, the mean alone (k = 1) otherwise; rows with an error hold zeros}, n_tokens per
        document, error per document, the run's pipeline.counts.BlockCounts).
    """
    import pyarrow as pa

    from ..counts import BlockCounts
    from ..engine.progress import progress_bar
    from ..engine.run import BatchProgress

    keep = {name: dim if f.strategy in MULTI_WINDOW else dim // len(PROBE_PARTS)
            for f, (name, dim) in zip(pipe.resolution().features, pipe.resolution().columns)}
    columns: dict[str, list] = {name: [] for name in keep}
    n_tokens, errors, totals = [], [], BlockCounts()
    bar = progress_bar(len(texts), 0, progress)
    tracker = BatchProgress(bar)
    pipe.encode_stage().encoder.on_batch = tracker.batch
    blocks = (pa.table({"id": pa.array(picked[start:start + rows], type=pa.int64()),
                        "text": pa.array(texts[start:start + rows], type=pa.string())})
              for start in range(0, len(texts), rows))
    try:
        # each block's model part in pieces of --block-tokens (late's hidden states are per window token):
        # memory holds one piece's windows, and the sample's document vectors, nothing more
        for _, done, last in pipe.map_pieces(blocks, on_prepared=lambda b: tracker.start_block(len(b.docs), sum(
                len(w.input_ids) for w in b.unique)), max_tokens=pipe.cfg.encode.block_tokens):
            table = done.table
            totals.add(done.counts)
            for name, width in keep.items():
                col = table.column(name).combine_chunks()
                values = col.values.to_numpy(zero_copy_only=False)            # (n * 4D,), nulls as zeros
                columns[name].append(values.reshape(len(col), -1)[:, :width].astype(np.float32))   # (n, width)
            n_tokens += table.column(N_TOKENS).to_pylist()
            errors += table.column(ERROR).to_pylist()
            del done, table
            if last:
                tracker.end_block()
    finally:
        bar.close()
    return {name: np.concatenate(parts) for name, parts in columns.items()}, n_tokens, errors, totals


def probe_variants(features, matrices: list[np.ndarray], dim_of) -> list[tuple[Feature, str, np.ndarray]]:
    """(feature, aggregate, X) to probe: each feature's mean, and for chunk, sliding and late also first, last,
    max, mean,max and first,last,mean,max (PROBE_AGGREGATES: slices of the sample's PROBE_PARTS vectors).

    Args:
        features: the probe features; matrices: their (N, k x D) sample vectors (_extract_sample);
        dim_of: feature -> D of one window vector.
    """
    out = []
    for f, M in zip(features, matrices):
        d = dim_of(f)
        for agg, parts in PROBE_AGGREGATES.items():
            if agg == "mean" or f.strategy in MULTI_WINDOW:
                out.append((f, agg, np.concatenate([M[:, k * d:(k + 1) * d] for k in parts], axis=1)))
    return out


def variant_name(f: Feature, aggregate: str) -> str:
    """The column extract would write for the feature with this --aggregate (several features: the
    _agg- suffix of pipeline.output.schema.feature_columns). Example: chunk:mean, "mean,max" -> f_chunk_mean_agg-mean-max."""
    return f.name if aggregate == "mean" else f"{f.name}_agg-{aggregate.replace(',', '-')}"


def _load_and_extract(cfg: PipelineConfig, tokenizer, texts: list[str], picked: np.ndarray, echo):
    """Load the model (extract's "loading model" line first, with cfg.write.progress) and run
    _extract_sample; returns (the options resolved against the model, _extract_sample's result). The
    weights are freed on return, before the classifiers run."""
    from ..engine.compose import Pipeline
    from ..options.config import DEFAULT_MODEL
    from ..model.facts import model_label

    name = cfg.model.model
    pipe = Pipeline.from_config(cfg, tokenizer)
    if pipe.encode_stage() is not None:
        pipe.encode_stage().open_store()   # a store that cannot be opened is refused before "loading model"
    if echo and cfg.write.progress:
        echo(f"loading model {model_label(name) if name == DEFAULT_MODEL else name} ...")
    return pipe.resolution(), _extract_sample(pipe, texts, picked, cfg.read.block_rows, cfg.write.progress)


def probe_corpus(cfg: PipelineConfig, label_col: str, sample: int = 500, folds: int = 5, seed: int = 0,
                 echo=None) -> dict[str, Any]:
    """Extract every probe feature (probe_feature_set) in one pass over a stratified sample of the
    corpus, then cross-validate a probe on each (as probe_files).

    Args:
        cfg: the run's options (the corpus, in any format extract reads; model, window, batch options); its features: the probe's.
        label_col: the input column of the labels (strings; rows with an empty label are dropped).
        sample: documents in the stratified sample (all when the corpus has fewer).
        folds, seed: the stratified k-fold, as probe_files (the same folds for every feature).

    Returns:
        {"results": one dict per feature and aggregation (each feature's mean; chunk, sliding and late also
        first, last, max, mean,max and first,last,mean,max: PROBE_AGGREGATES) ranked by accuracy_mean (best first) with
        feature (the column name extract gives it), spec, strategy, pooling, layers, layer_agg,
        aggregate, windows_per_doc (the feature's own windows per document, run alone), dimension and
        the cross_validate_probe keys; "best", "cheapest" (results entries: the cheapest in windows per
        document, then dimension, among those within one sd of the best's mean); "lexical" (the TF-IDF
        baseline on the same documents and folds: lexical_row, word or character n-grams); each BERT
        result also has kind "bert" and seconds (its cross-validation alone; the one extraction pass is
        extract_seconds); "hybrids" (hybrid_rows: the HYBRID_TOP best BERT features, and the best with a partner);
        "compact" (compact_rows and dims_rows of the best, each with bytes_per_doc), "smallest" (smallest_within),
        "dims_skipped"; a lexical, hybrid or compact row that cannot be computed has "error"
        (its reason) and None scores (not_computable), the BERT rows returned all the same; "documents",
        "dropped_labels", "left_out", "classes", "majority", "windows_encoded", "windows_requested",
        "windows_cached" (served by the window store), "extract_seconds", "probe_seconds" (the BERT rows'
        cross-validations), "baseline_seconds" (the lexical, hybrid and compact rows'; wall times),
        "label_col", "tokens", "unknown_tokens" (the sample's)}. With ``echo`` and cfg.write.progress:
        extract's "loading model" line and a document progress bar on stderr.

    Raises:
        ConfigError, ModelError, InputError: as extract, plus the label checks of probe_files.
    """
    import dataclasses
    import time

    from ..model.facts import model_facts

    for name, value in (("folds", folds), ("sample", sample)):
        if value < 2:
            raise ConfigError(f"--{name}={value} must be >= 2")
    facts, tokenizer = model_facts(cfg.model)
    features = probe_feature_set(facts.num_hidden_layers, bool(facts.has_pooler))
    cfg = dataclasses.replace(cfg, pool=dataclasses.replace(cfg.pool, features=features, level="document",
                                                            aggregate=",".join(PROBE_PARTS)),
                              read=dataclasses.replace(cfg.read, keep_cols=(), with_source=False))  # blocks: id, text
    texts, labels, picked, dropped, corpus = _sampled_corpus(cfg, label_col, sample, folds, seed)

    t0 = time.perf_counter()
    resolved, (columns, n_tokens, errors, totals) = _load_and_extract(cfg, tokenizer, texts, picked, echo)
    extract_seconds = time.perf_counter() - t0
    if echo:
        echo(pass_line(len(texts), totals, extract_seconds))

    ok = np.array([e is None for e in errors])
    y = labels[ok]
    classes, counts = check_classes(y, folds, ", ".join(cfg.read.inputs), label_col, corpus)
    tokens = np.asarray(n_tokens)[ok]
    t1 = time.perf_counter()
    results, variants = _bert_rows(features, resolved, [columns[name][ok] for name, _ in resolved.columns], tokens,
                                   y, folds, seed)
    del columns
    probe_seconds = time.perf_counter() - t1
    kept = [t for t, good in zip(texts, ok) if good]   # the same documents, labels and folds as the BERT rows
    results.sort(key=lambda r: -r["accuracy_mean"])  # stable: ties keep the feature order
    best = results[0]
    t2 = time.perf_counter()
    lexical, hybrids, compact, dims_skipped = _baseline_rows(results, variants, kept, y, folds, seed)
    baseline_seconds = time.perf_counter() - t2
    near = [r for r in results if r["accuracy_mean"] >= best["accuracy_mean"] - best["accuracy_std"]]
    cheapest = min(near, key=lambda r: (r["windows_per_doc"], r["dimension"], -r["accuracy_mean"]))
    return {"results": results, "best": best, "cheapest": cheapest, "lexical": lexical, "hybrids": hybrids,
            "compact": compact, "smallest": smallest_within(best, compact), "dims_skipped": dims_skipped,
            "documents": len(texts), "dropped_labels": dropped, "left_out": int((~ok).sum()), "classes": len(classes),
            "majority": float(counts.max() / counts.sum()), "folds": folds,
            "windows_encoded": totals.windows, "windows_requested": totals.windows_requested,
            "windows_cached": totals.windows_cached, "extract_seconds": extract_seconds, "probe_seconds": probe_seconds,
            "baseline_seconds": baseline_seconds, "label_col": label_col,
            "tokens": int(sum(n_tokens)), "unknown_tokens": totals.unknown}


HYBRID_TOP = 3   # the best BERT features each stacked with the lexical model (and the two best together)


def _bert_rows(features, resolved, matrices: list[np.ndarray], tokens: np.ndarray, y: np.ndarray, folds: int,
               seed: int) -> tuple[list[dict[str, Any]], list]:
    """probe_corpus's BERT rows (kind "bert", in feature order, "index" into the variants) and the variants
    (probe_variants: each feature's mean; the several-window strategies every PROBE_AGGREGATES entry)."""
    from joblib import Parallel, delayed

    from ..output.schema import strategy_metadata

    variants = probe_variants(features, matrices, lambda f: f.dim(resolved.facts.hidden_size))
    # one feature per process (joblib's default loky backend): the fits are single-threaded, so the
    # cores share the features; the scores are those of cross_validate_probe run one by one.
    scores = Parallel(n_jobs=_probe_jobs(len(variants)))(
        delayed(cross_validate_probe)(X, y, folds, seed) for _, _, X in variants)
    results = [{"feature": variant_name(f, agg), "kind": "bert", "index": i, "spec": f.spec, "strategy": f.strategy,
                "pooling": f.pooling, "layers": list(f.layers), "layer_agg": f.layer_agg, "aggregate": agg,
                "dimension": int(X.shape[1]), "bytes_per_doc": 4 * int(X.shape[1]),   # float32, as extract writes it
                "windows_per_doc": windows_per_doc(strategy_metadata(resolved.cfg, f.strategy), tokens),
                "extract_options": f.extract_options(), **score}
               for i, ((f, agg, X), score) in enumerate(zip(variants, scores))]
    return results, variants


def _baseline_rows(ranked: list[dict[str, Any]], variants: list, texts: list[str], y: np.ndarray, folds: int,
                   seed: int) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[int]]:
    """(the lexical row, the hybrid rows of the HYBRID_TOP best BERT features, the compact rows of the best:
    compact_rows' and dims_rows', the PROBE_DIMS left out for want of training rows)
    on the same documents and folds; ``ranked``: the BERT rows, best first.

    These rows are extras beside the BERT rows: one that cannot be computed is kept with "error" (the
    reason, as not_computable gives it) and no scores, and the others are still computed, so the BERT
    ranking is never lost to them. The lexical row uses word n-grams, or character n-grams where words
    leave no term (lexical_row); the hybrids use the n-grams the lexical row used."""
    lexical = lexical_row(texts, y, folds, seed, _probe_jobs(folds))
    top = [(r, variants[r["index"]][2]) for r in ranked[:HYBRID_TOP]]
    with one_blas_thread():   # the fits made in this process (the TF-IDF halves); workers limit themselves
        if "error" in lexical:
            hybrids = [not_computable(f"hybrid:{r['feature']}", "hybrid", "it stacks the lexical baseline, which "
                                      "could not be computed", base=r, windows_per_doc=r["windows_per_doc"])
                       for r, _ in top]
        else:
            try:
                hybrids = hybrid_rows(top, texts, y, folds, seed, lexical["dimension"], lexical,
                                      [(r, variants[r["index"]][2]) for r in partners(ranked)])
            except Exception as err:   # an extra row: the BERT rows are kept whatever fails here
                hybrids = [not_computable(f"hybrid:{r['feature']}", "hybrid", reason(err), base=r,
                                          windows_per_doc=r["windows_per_doc"]) for r, _ in top]
        try:
            compact = compact_rows(ranked[0], top[0][1], y, folds, seed)
        except Exception as err:   # as above
            compact = [not_computable(f"{ranked[0]['feature']}:{form}", "compact", reason(err), form=form,
                                      windows_per_doc=ranked[0]["windows_per_doc"]) for form in ("int8", "binary")]
        try:   # the best at fewer dimensions (a PCA fitted in each training fold) x float32/int8/binary
            projected, skipped = dims_rows(ranked[0], top[0][1], y, folds, seed, jobs=_probe_jobs(12))
        except Exception as err:   # as above
            projected, skipped = [not_computable(f"{ranked[0]['feature']}:pca", "compact", reason(err), form="pca",
                                                 windows_per_doc=ranked[0]["windows_per_doc"])], []
    return lexical, hybrids, compact + projected, skipped


def lexical_row(texts: list[str], y: np.ndarray, folds: int, seed: int, jobs: int) -> dict[str, Any]:
    """The lexical baseline's row (cross_validate_lexical's keys, feature, kind "lexical", windows_per_doc 0)
    on word uni+bigrams; where those leave no term in a training fold (text without spaces between
    words: Chinese, Japanese, Thai), on character uni+bigrams within word boundaries ("char_wb"), and
    "fallback" says why. A row that still cannot be computed is not_computable's, with the reason.
    Example: 20 Chinese texts -> feature "tfidf_char_wb_1-2gram_lr", analyzer "char_wb"."""
    fallback = None
    for analyzer in ("word", "char_wb"):
        try:
            score = cross_validate_lexical(texts, y, folds, seed, jobs=jobs, analyzer=analyzer)
        except Exception as err:   # an extra row: the BERT rows are kept whatever fails here
            if analyzer == "word" and no_terms(err):
                fallback = ("character n-grams: no word or word pair occurs in 2 training texts (text without "
                            "spaces between words?)")
                continue
            return not_computable(lexical_name(analyzer), "lexical", reason(err))
        row = {"feature": lexical_name(analyzer), "kind": "lexical", "windows_per_doc": 0.0, **score}
        return {**row, "fallback": fallback} if fallback else row
    raise AssertionError("unreachable: the char_wb pass returns")


def partners(ranked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The BERT rows a two-feature hybrid pairs with the best (``ranked``: best first): the best row of another
    feature (not the best's own spec under another aggregation, nearly the same vectors), and the best of
    another strategy (head with late chunks: windows that see the text otherwise), the same row once."""
    best = ranked[0]
    other = next((r for r in ranked[1:] if r["spec"] != best["spec"]), None)
    apart = next((r for r in ranked[1:] if r["strategy"] != best["strategy"]), None)
    return [r for i, r in enumerate((other, apart)) if r is not None and (i == 0 or r is not other)]


def hybrid_rows(top: list[tuple[dict[str, Any], np.ndarray]], texts: list[str], y: np.ndarray, folds: int, seed: int,
                lexical_dim: int, lexical: dict[str, Any] | None = None,
                partnered: list[tuple[dict[str, Any], np.ndarray]] | None = None) -> list[dict[str, Any]]:
    """One row per (BERT result, its (N, D) sample vectors) of ``top``: HybridClassifier (stacking,
    pipeline.classify.hybrid) of the lexical model and that feature, cross-validated on the probe's
    outer folds (cross_validate_hybrid); and one more per (result, vectors) of ``partnered`` (partners):
    the lexical model with the first feature of ``top`` and that one (one BERT model each under the one
    second level, the same nested folds). Keys: feature
    ("hybrid:" + the BERT features' names joined by "+"), kind "hybrid", base (the first BERT result),
    bases (every one), windows_per_doc (the features' together: _windows_of), dimension (the Ds + the
    lexical baseline's vocabulary size), and cross_validate_hybrid's. The lexical half is fitted once per outer
    fold for all of them, with the C the lexical row chose there (``lexical``: its result; None: searched
    again; its "analyzer": the n-grams it used); the scores are the same as one cross_validate_hybrid each
    (cross_validate_hybrids)."""
    from .hybrid import cross_validate_hybrids

    given = {} if lexical is None else {"lexical_Cs": lexical.get("C"), "lexical_folds": lexical.get("inner_folds")}
    analyzer = "word" if lexical is None else lexical.get("analyzer", "word")
    pairs = [((r,), (X,)) for r, X in top] + [((top[0][0], r), (top[0][1], X)) for r, X in (partnered or [])]
    scores = cross_validate_hybrids(texts, [Xs if len(Xs) > 1 else Xs[0] for _, Xs in pairs], y, folds, seed,
                                    jobs=_probe_jobs(len(pairs)), analyzer=analyzer, **given)
    return [{"feature": "hybrid:" + "+".join(r["feature"] for r in rs), "kind": "hybrid", "base": rs[0],
             "bases": list(rs), "windows_per_doc": _windows_of(rs),
             "dimension": sum(int(X.shape[1]) for X in Xs) + lexical_dim, "analyzer": analyzer, **score}
            for (rs, Xs), score in zip(pairs, scores)]


def _windows_of(results) -> float:
    """Windows per document of extracting these BERT features together: one strategy's windows are shared."""
    per = {}
    for r in results:
        per[r.get("strategy")] = max(per.get(r.get("strategy"), 0.0), r["windows_per_doc"])
    return float(sum(per.values()))


def _probe_jobs(n_features: int) -> int:
    """Processes for the probes: the CPUs this process may use (os.sched_getaffinity), at most one per feature."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, n_features))


