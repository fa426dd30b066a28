"""probe on text without spaces between words (Chinese): the lexical baseline falls back to character
n-grams (each score against a hand-written nested CV with scikit-learn's TfidfVectorizer(analyzer="char_wb")),
the hybrids use the same n-grams, and an extra row that cannot be computed is marked with its reason while
the BERT rows are still ranked and written."""
from __future__ import annotations

import csv
import re

import numpy as np
import pytest
from conftest import invoke, run_case_script

from pipeline.classify import probe as probe_mod
from pipeline.classify.folds import LEXICAL_NAME, cross_validate_lexical, no_terms
from pipeline.classify.hybrid import HybridClassifier, cross_validate_hybrid, hybrid_inputs
from test_probe_lexical import by_hand

CHAR_NAME = "tfidf_char_wb_1-2gram_lr"


@pytest.fixture(scope="module")
def chinese(tmp_path_factory):
    """(path of the 20-row Chinese corpus of the shared case, its texts, its labels (str))."""
    path = tmp_path_factory.mktemp("zh") / "zh.csv"
    run_case_script("B94.make_corpus.py", path)
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return path, [r["text"] for r in rows], np.asarray([r["label"] for r in rows], dtype=object)


def test_word_ngrams_leave_no_term_and_char_ngrams_equal_a_hand_written_nested_cv(chinese):
    _, texts, y = chinese
    with pytest.raises(ValueError) as err:
        cross_validate_lexical(texts, y, 3, 0)
    assert no_terms(err.value)
    got = cross_validate_lexical(texts, y, 3, 0, analyzer="char_wb")
    acc, f1 = by_hand(texts, y, 3, 0, analyzer="char_wb")
    np.testing.assert_allclose(got["accuracy"], acc)
    np.testing.assert_allclose(got["f1_macro"], f1)
    assert got["analyzer"] == "char_wb" and got["dimension"] > 0


def test_hybrid_on_char_ngrams_equals_its_cross_validation_and_word_ngrams_say_what_to_pass(chinese):
    from pipeline.classify.probe import hybrid_rows

    _, texts, y = chinese
    V = np.random.default_rng(0).normal(size=(len(texts), 5)).astype(np.float32)
    lexical = cross_validate_lexical(texts, y, 3, 0, analyzer="char_wb")
    rows = hybrid_rows([({"feature": "f_a", "windows_per_doc": 1.0}, V)], texts, y, 3, 0, lexical["dimension"], lexical)
    reference = cross_validate_hybrid(texts, V, y, 3, 0, analyzer="char_wb")   # HybridClassifier via scikit-learn
    assert rows[0]["accuracy"] == reference["accuracy"] and rows[0]["analyzer"] == "char_wb"
    with pytest.raises(ValueError, match=r"no word or word pair occurs in 2 training texts.*pass analyzer='char_wb'"):
        HybridClassifier(inner_folds=3).fit(hybrid_inputs(texts, V), y)


@pytest.fixture(scope="module")
def zh_model(tmp_path_factory):
    """A tiny random BERT with the default model's WordPiece vocabulary, which holds CJK characters
    (the shared case's builder); the session's tiny BERT would read every Chinese text as unknown."""
    out = tmp_path_factory.mktemp("zh_model")
    run_case_script("tiny_bert.make_model.py", out)
    return out / "bert_tiny"


def _probe(runner, model, src, out):
    return invoke(runner, ["probe", src, "--label-col", "label", "--model", model, "--folds", 3, "--out", out])


def _rows(out) -> list[dict[str, str]]:
    with open(out, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_probe_on_chinese_ranks_and_writes_every_row(runner, zh_model, chinese, tmp_path):
    src, texts, y = chinese
    out = tmp_path / "rank.csv"
    result = _probe(runner, zh_model, src, out)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    rows = _rows(out)
    ranked = [line for line in result.output.splitlines() if re.match(r"\s*\d+\s+f_", line)]
    assert len([r for r in rows if r["kind"] == "bert"]) == len(ranked) > 0
    lexical = [r for r in rows if r["kind"] == "lexical"]
    assert [r["feature"] for r in lexical] == [CHAR_NAME]
    acc, f1 = by_hand(texts, y, 3, 0, analyzer="char_wb")
    assert float(lexical[0]["accuracy"]) == pytest.approx(acc.mean())
    assert float(lexical[0]["macro_f1"]) == pytest.approx(f1.mean())
    assert len([r for r in rows if r["kind"] == "hybrid" and r["accuracy"] and "+" not in r["feature"]]) == 3
    assert [r for r in rows if r["kind"] == "hybrid" and r["accuracy"] and "+" in r["feature"]]   # two features
    assert (f"lexical baseline {CHAR_NAME} {acc.mean():.3f} ± {acc.std():.3f} (macro-F1 {f1.mean():.3f}; character "
            "n-grams: no word or word pair occurs in 2 training texts (text without spaces between words?))"
            in result.output)


def test_a_failing_extra_row_is_marked_and_the_bert_rows_are_written(runner, zh_model, chinese, tmp_path,
                                                                     monkeypatch):
    src, _, _ = chinese

    def failing(*args, **kwargs):
        raise RuntimeError("the lexical fit\nfailed")

    monkeypatch.setattr(probe_mod, "cross_validate_lexical", failing)
    out = tmp_path / "rank.csv"
    result = _probe(runner, zh_model, src, out)
    assert result.exit_code == 0, result.output
    rows = _rows(out)
    bert = [r for r in rows if r["kind"] == "bert"]
    ranked = [line for line in result.output.splitlines() if re.match(r"\s*\d+\s+f_", line)]
    assert len(bert) == len(ranked) > 0 and all(r["accuracy"] for r in bert)
    lexical = [r for r in rows if r["kind"] == "lexical"]
    hybrids = [r for r in rows if r["kind"] == "hybrid"]
    assert [(r["feature"], r["accuracy"], r["dim"]) for r in lexical] == [(LEXICAL_NAME, "", "")]
    assert len(hybrids) == 3 and all(r["accuracy"] == "" for r in hybrids)
    assert rows[-4:] == lexical + hybrids                         # rows without scores come last
    assert len([r for r in rows if r["kind"] == "compact" and r["accuracy"]]) == 2
    assert (f"lexical baseline {LEXICAL_NAME}: not computable (RuntimeError: the lexical fit failed); the BERT rows "
            "are ranked without it") in result.output
    assert ("hybrid rows: not computable (it stacks the lexical baseline, which could not be computed)"
            in result.output)
    assert re.search(rf"^\s*-\s+{LEXICAL_NAME}\s+0\s+-\s+not computable$", result.output, re.M)


def test_summary_lines_carry_the_char_analyzer():
    import longbert
    from pipeline.classify.probe_ranking import hybrid_python, lexical_summary
    from pipeline.options.config import PipelineConfig

    lex = {"feature": CHAR_NAME, "accuracy_mean": 0.9, "accuracy_std": 0.01, "f1_macro_mean": 0.89, "folds": 3,
           "analyzer": "char_wb"}
    assert lexical_summary(lex, {"feature": "f_head_cls", "accuracy_mean": 0.8}).endswith(
        "model = lexical_model(3, 0, analyzer='char_wb').fit(texts, labels)")
    cfg = PipelineConfig.from_options(inputs=("c.csv",))
    line = hybrid_python(cfg, {"spec": "head:cls", "strategy": "head"}, "char_wb")
    assert line == ("longbert.HybridClassifier(vectorizer=longbert.LongBertVectorizer(feature='head:cls'), "
                    "analyzer='char_wb').fit(texts, labels)")
    model = eval(line.removesuffix(".fit(texts, labels)"), {"longbert": longbert})
    assert model.analyzer == "char_wb" and model.vectorizer.feature == "head:cls"
