"""probe's stratified sample keeps every class at the fold count, and its class messages name the
right fix (issue 17: "valid input refused", "messages that point the wrong way")."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import invoke, words

from pipeline.errors import InputError
from pipeline.classify.folds import check_classes, stratified_sample


def test_sample_keeps_fold_count_of_a_small_class():
    labels = np.array(["a"] * 96 + ["b"] * 4)
    # share alone: quotas 19.2 and 0.8 -> 19 a + 1 b (largest remainder); b is below 4 folds
    alone = stratified_sample(labels, 20, seed=0)
    assert (labels[alone] == "b").sum() == 1 and len(alone) == 20
    picked = stratified_sample(labels, 20, seed=0, min_per_class=4)
    assert len(picked) == 20 and (labels[picked] == "b").sum() == 4 and (labels[picked] == "a").sum() == 16
    assert picked.tolist() == sorted(set(picked.tolist()))
    # floors above n: every class keeps min(rows, floor), the sample grows to 3 + 3 + 2 = 8
    few = np.array(["a"] * 10 + ["b"] * 10 + ["c"] * 2)
    grown = stratified_sample(few, 5, seed=1, min_per_class=3)
    assert sorted(few[grown].tolist()) == ["a"] * 3 + ["b"] * 3 + ["c"] * 2


def test_class_message_names_the_real_fix():
    y = np.array(["a"] * 10 + ["b"] * 3)
    with pytest.raises(InputError) as err:  # the corpus itself has 3 rows of b: add rows or lower --folds
        check_classes(y, 5, "c.csv", "label", corpus={"a": 10, "b": 3})
    assert str(err.value) == ("c.csv: stratified 5-fold needs >= 5 rows per class; 'b': 3 rows; lower --folds to 3 "
                              "or add rows of those classes")
    with pytest.raises(InputError) as err:  # the corpus has 6 rows of b; 3 were lost to row errors
        check_classes(y, 5, "c.csv", "label", corpus={"a": 10, "b": 6})
    assert str(err.value) == ("c.csv: stratified 5-fold needs >= 5 rows per class; 'b': 3 rows; the corpus has 6 "
                              "rows of 'b', but only 3 got features (the others have row errors, e.g. empty text; "
                              "see the left-out rows): fix or drop those rows, or lower --folds to 3")


def test_probe_corpus_whose_small_class_has_enough_rows(runner, tiny_model_dir, tmp_path):
    # 40 rows of a, 5 of b; --sample 20 by share alone would keep round(5 * 20 / 45) = 2 b rows < 5 folds
    rows = [f"{words(3 + i % 7, i)},a" for i in range(40)] + [f"{words(6, 50 + i)} h,b" for i in range(5)]
    src = tmp_path / "c.csv"
    src.write_text("text,label\n" + "\n".join(rows) + "\n")
    result = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, "--max-length", 16,
                             "--overlap", 4, "--sample", 20, "--folds", 5])
    assert result.exit_code == 0, result.output
    assert "20 documents (stratified sample)" in result.output


def test_probe_corpus_too_few_rows_of_a_class(runner, tiny_model_dir, tmp_path):
    rows = [f"{words(4, i)},a" for i in range(10)] + [f"{words(4, 20 + i)},b" for i in range(3)]
    src = tmp_path / "c.csv"
    src.write_text("text,label\n" + "\n".join(rows) + "\n")
    result = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, "--folds", 5])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {src}: stratified 5-fold needs >= 5 rows per class; 'b': 3 rows; lower --folds to 3 or add rows of "
        "those classes")
