"""probe CORPUS's report: the unknown-token warning extract gives, and one feature count that agrees
with its table."""
from __future__ import annotations

import re

from conftest import invoke, words
from transformers import BertTokenizerFast


def probe(runner, model_dir, src):
    return invoke(runner, ["probe", src, "--label-col", "label", "--model", model_dir, "--max-length", 16,
                           "--overlap", 4, "--folds", 2])


def test_probe_warns_about_unknown_tokens_as_extract_does(runner, tiny_model_dir, tmp_path):
    texts = [f"{words(4 + i % 3, i)} zz qq" for i in range(12)]       # zz and qq are not in the tiny vocabulary
    src = tmp_path / "c.csv"
    src.write_text("text,label\n" + "\n".join(f"{t},{'ab'[i % 2]}" for i, t in enumerate(texts)) + "\n")
    tok = BertTokenizerFast.from_pretrained(tiny_model_dir)
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    unknown, tokens = sum(i.count(tok.unk_token_id) for i in ids), sum(map(len, ids))
    assert unknown == 24 and tokens == 24 + sum(4 + i % 3 for i in range(12))
    result = probe(runner, tiny_model_dir, src)
    assert result.exit_code == 0, result.output
    share = f"{100 * unknown / tokens:.1f}%"
    assert (f"warning: {share} of tokens ({unknown} of {tokens}) are unknown to the model's vocabulary, which does "
            "not cover this text; pass --model with one that does (docs/models.md)") in result.output
    extract = invoke(runner, ["extract", src, "--model", tiny_model_dir, "--max-length", 16,
                              "-o", tmp_path / "o.parquet"])
    assert f"warning: {share} of tokens ({unknown} of {tokens})" in extract.output   # the same words


def test_probe_without_unknown_tokens_gives_no_warning_and_one_feature_count(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "c.csv"
    src.write_text("text,label\n" + "\n".join(f"{words(4 + i % 5, i)},{'ab'[i % 2]}" for i in range(12)) + "\n")
    result = probe(runner, tiny_model_dir, src)
    assert result.exit_code == 0, result.output
    assert "are unknown to the model" not in result.output
    ranked = [line for line in result.output.splitlines() if re.match(r"\s*\d+\s+f_", line)]
    # the tiny model (2 layers, a pooler): 5 window strategies x (cls, mean, max x 3 layer choices, and pooler),
    # and chunk's and sliding's five more aggregations (first, last, max, mean,max, first,last,mean,max) of each
    # of their 10; late: (mean, max) x 3 layer choices, each in 6 aggregations
    assert len(ranked) == 5 * (3 * 3 + 1) + 2 * 5 * 10 + 2 * 3 * 6
    assert re.findall(r"(\d+) features", result.output) == [str(len(ranked))]


def test_a_second_probe_over_a_window_store_says_its_windows_came_from_the_store(runner, tiny_model_dir, tmp_path):
    src = tmp_path / "c.csv"
    src.write_text("text,label\n" + "\n".join(f"{words(4 + i % 5, i)},{'ab'[i % 2]}" for i in range(12)) + "\n")
    args = ["--cache", tmp_path / "store"]
    first = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, "--max-length", 16,
                            "--overlap", 4, "--folds", 2, *args])
    assert first.exit_code == 0, first.output
    encoded, asked = map(int, re.search(r"one pass: (\d+) windows encoded for (\d+) asked \((\d+) shared\)",
                                        first.output).groups()[:2])
    second = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, "--max-length", 16,
                             "--overlap", 4, "--folds", 2, *args])
    assert second.exit_code == 0, second.output
    assert (f"one pass: 0 windows encoded, {encoded} from the cache, for {asked} asked ({asked - encoded} shared)"
            in second.output)                                        # shared: by de-duplication, as in the first


def test_the_hybrid_line_says_ties_beats_and_by_how_much_at_what_cost():
    from pipeline.classify.probe_ranking import compared, hybrid_summary
    from pipeline.options.config import PipelineConfig

    assert compared(0.9, 0.75, "x") == "beats x (0.750) by +0.150"
    assert compared(0.75, 0.9, "x") == "is below x (0.900) by -0.150"
    assert compared(0.9, 0.9000001, "x") == "ties x (0.900)"
    base = {"feature": "f_head_cls", "spec": "head:cls", "strategy": "head", "extract_options": "--strategy head "
            "--pooling cls", "accuracy_mean": 0.9, "seconds": 0.5}
    hybrid = {"feature": "hybrid:f_head_cls", "base": base, "accuracy_mean": 0.9, "accuracy_std": 0.02,
              "windows_per_doc": 1.0, "seconds": 2.25}
    lex = {"accuracy_mean": 0.75, "dimension": 1234}
    lines = hybrid_summary([hybrid], base, lex, PipelineConfig.from_options(inputs=("c.csv",)), "label")
    assert lines == ["best hybrid: hybrid:f_head_cls 0.900 ± 0.020 ties the best BERT feature f_head_cls (0.900) and "
                     "beats the lexical baseline (0.750) by +0.150; it costs its BERT feature's 1.00 windows/doc plus a "
                     "TF-IDF model of 1234 terms, 2.2 s to cross-validate against 0.5 s for the BERT feature alone"]


def test_the_printed_extract_command_keeps_the_reading_options_and_paths_as_typed(runner, tiny_model_dir, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = [f"d{i};t{i};{words(4 + i % 5, i)};{'ab'[i % 2]}" for i in range(12)]
    (tmp_path / "c.csv").write_text("doc;title;body;label\n" + "\n".join(rows) + "\n")
    result = invoke(runner, ["probe", "c.csv", "--label-col", "label", "--model", tiny_model_dir, "--max-length", 16,
                             "--overlap", 4, "--folds", 2, "--cache", "store", "--id-col", "doc", "--text-col", "body",
                             "--keep-col", "title", "--delimiter", ";"])
    assert result.exit_code == 0, result.output
    assert "has no effect" not in result.output
    command = next(line.strip() for line in result.output.splitlines() if line.strip().startswith("longbert extract"))
    assert command.startswith(f"longbert extract c.csv --text-col body --id-col doc --delimiter ';' --model "
                              f"{tiny_model_dir} --cache store --max-length 16 ")
    assert " --keep-col title --keep-col label " in command
    import shlex

    extract = invoke(runner, shlex.split(command)[1:])             # the command as printed runs, ids and all
    assert extract.exit_code == 0, extract.output
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "features.parquet")
    assert table.column("id").to_pylist() == [f"d{i}" for i in range(12)]
    assert table.column("title").to_pylist() == [f"t{i}" for i in range(12)]
