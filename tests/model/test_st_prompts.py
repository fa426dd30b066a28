"""A sentence-transformers folder's prompts (config_sentence_transformers.json's prompts, default_prompt_name):
the vectors equal the folder's own SentenceTransformer.encode(texts, prompt_name=...) for the default prompt, another
named one and none, with include_prompt true and false, mean and cls pooling, and a document longer than the
window (head); each window holds the prompt after [CLS]; unknown names exit 2; the prompt enters the window-store
key and the --resume fingerprint."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import extract_features, invoke, words, write_csv

st = pytest.importorskip("sentence_transformers")

ST_MAX = 64
PROMPTS = {"query": "w30 w31 ", "passage": "w35 "}
TEXTS = [words(5), words(17, 3), words(100, 7), "w1"]   # the third is longer than a window of 64 positions


@pytest.fixture(scope="module")
def prompt_folder(tiny_model_dir, tmp_path_factory):
    """(pooling, include_prompt) -> (folder, its SentenceTransformer), saved by sentence-transformers with
    PROMPTS and default_prompt_name "query"; built once each."""
    from sentence_transformers import SentenceTransformer, models

    built: dict = {}

    def make(pooling: str, include: bool):
        if (pooling, include) not in built:
            folder = tmp_path_factory.mktemp(f"prompted_{pooling}_{include}")
            modules = [models.Transformer(str(tiny_model_dir), max_seq_length=ST_MAX),
                       models.Pooling(32, pooling_mode=pooling, include_prompt=include)]
            SentenceTransformer(modules=modules, prompts=PROMPTS, default_prompt_name="query").save(str(folder))
            built[pooling, include] = folder, SentenceTransformer(str(folder), device="cpu")
        return built[pooling, include]
    return make


def saved_prompts(folder: Path) -> dict:
    """The prompts as the folder's config_sentence_transformers.json holds them (PROMPTS and the library's own)."""
    return json.loads((Path(folder) / "config_sentence_transformers.json").read_text())["prompts"]


def reference(model, prompt_name: str | None, texts=TEXTS) -> np.ndarray:
    """The folder's own encode: its default prompt (None), a named one, or no prompt ("none": prompt="")."""
    if prompt_name == "none":
        return model.encode(texts, prompt="")
    return model.encode(texts, prompt_name=prompt_name)


def extract(runner, tmp_path, model, *args, texts=TEXTS):
    """conftest.extract_features on ``texts``: (result, features (n, D) or None, metadata or None)."""
    return extract_features(tmp_path, model, texts, *args, runner=runner)


@pytest.mark.parametrize("prompt_name", [None, "passage", "none"])
@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_the_vectors_equal_the_folders_encode_with_that_prompt(runner, tmp_path, prompt_folder, pooling, include,
                                                               prompt_name):
    folder, model = prompt_folder(pooling, include)
    args = ["--strategy", "head"] + ([] if prompt_name is None else ["--prompt-name", prompt_name])
    result, features, meta = extract(runner, tmp_path, folder, *args)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(features, reference(model, prompt_name), atol=1e-5)
    name = prompt_name or "query"
    settings = meta["folder_settings"]
    if name == "none":
        assert (settings["prompt_applied"], settings["prompt"]) == (False, None)
        assert "prompt" not in result.stdout
    else:
        assert settings["prompt_applied"] is True
        assert settings["prompt"] == {"name": name, "text": PROMPTS[name], "include_prompt": include}
        assert f"the model folder's prompt {name!r} ({PROMPTS[name]!r}) put after [CLS] in every window" \
            in result.stdout
        assert ("left out of pooling" in result.stdout) is (not include)
    assert settings["declared"]["prompts"] == saved_prompts(folder) and settings["declared"]["default_prompt_name"] == "query"


def test_the_prompt_changes_the_vectors_and_include_prompt_false_changes_cls_too(prompt_folder):
    """Not a test that cannot fail: the settings compared above give different vectors."""
    _, mean_in = prompt_folder("mean", True)
    _, cls_in = prompt_folder("cls", True)
    _, cls_out = prompt_folder("cls", False)
    assert np.abs(reference(mean_in, None) - reference(mean_in, "none")).max() > 1e-3
    assert np.abs(reference(mean_in, None) - reference(mean_in, "passage")).max() > 1e-3
    assert np.abs(reference(cls_in, None) - reference(cls_out, None)).max() > 1e-3


def test_python_encode_and_the_vectorizer_take_prompt_name(prompt_folder):
    import longbert

    folder, model = prompt_folder("mean", False)
    got = longbert.encode(TEXTS, model=str(folder), device="cpu", cache=None, strategy="head", prompt_name="passage")
    np.testing.assert_allclose(got, reference(model, "passage"), atol=1e-5)
    vectorizer = longbert.LongBertVectorizer(model=str(folder), device="cpu", strategy="head", cache=None)
    np.testing.assert_allclose(vectorizer.transform(TEXTS), reference(model, None), atol=1e-5)
    vectorizer.set_params(prompt_name="none")
    np.testing.assert_allclose(vectorizer.transform(TEXTS), reference(model, "none"), atol=1e-5)


def test_a_short_windows_ids_are_the_tokenizers_of_prompt_plus_text(prompt_folder):
    """The window is what sentence-transformers tokenizes: its tokenizer on prompt + text, specials included."""
    from transformers import AutoTokenizer

    import longbert

    folder, _ = prompt_folder("mean", True)
    tok = AutoTokenizer.from_pretrained(folder)
    for name, text in [("query", words(9)), ("passage", "w1")]:
        pipe = longbert.Pipeline.from_options(model=str(folder), prompt_name=name, strategy="head")
        batch = pipe.process(longbert.Batch.from_texts([text]), 0, 2)   # tokenize, segment
        (window,) = batch.windows["head"]
        assert window.input_ids.tolist() == tok(PROMPTS[name] + text)["input_ids"]
        assert window.prompt_tokens == len(tok(PROMPTS[name], add_special_tokens=False)["input_ids"])


P_IDS = (30, 31)   # a prompt of two tokens in windows of 16 positions: C = 14, C' = 12


@pytest.mark.parametrize("strategy, spans", [
    ("head", [((0, 12),)]),
    ("tail", [((18, 30),)]),
    ("head_tail", [((0, 4), (22, 30))]),   # H = round(14 * 128 / 510) = 4 kept; T = min(10, 12 - 4) = 8
    ("chunk", [((0, 12),), ((12, 24),), ((24, 30),)]),
    ("sliding", [((0, 12),), ((8, 20),), ((16, 28),), ((24, 30),)]),   # overlap 4: step 12 - 4
    ("late", [((0, 12),), ((8, 20),), ((16, 28),), ((24, 30),)]),
])
def test_each_strategy_cuts_c_minus_the_prompt_and_puts_the_prompt_after_cls(strategy, spans):
    from pipeline.options.config import SegmentConfig
    from pipeline.text.segment import segment
    from pipeline.types import TokenizedDoc

    ids = np.arange(100, 130, dtype=np.int32)   # 30 content tokens
    doc = TokenizedDoc(row=0, ids=ids, offsets=np.zeros((0, 2), np.int32), n_tokens=30)
    cfg = SegmentConfig(strategy=strategy, max_length=16, overlap=4,
                        **({"late_overlap": 4, "chunk_tokens": 4} if strategy == "late" else {}))
    windows = segment(doc, cfg, 2, 3, prompt_ids=P_IDS)
    assert [w.spans for w in windows] == spans
    for w in windows:
        content = [int(i) for s, e in w.spans for i in ids[s:e]]
        assert w.input_ids.tolist() == [2, *P_IDS, *content, 3] and len(w.input_ids) <= 16
        assert w.prompt_tokens == 2
    plain = segment(doc, cfg, 2, 3)   # no prompt: the window rules as before, C = 14
    assert plain[0].spans == ((16, 30),) if strategy == "tail" else plain[0].spans[0][0] == 0
    assert all(w.prompt_tokens == 0 and w.input_ids[1] == ids[w.spans[0][0]] for w in plain)
    assert max(e - s for w in plain for s, e in w.spans) <= 14


def test_a_prompt_name_the_folder_lacks_is_exit_2_listing_its_prompts(runner, tmp_path, prompt_folder):
    folder, _ = prompt_folder("mean", True)
    result, _, _ = extract(runner, tmp_path, folder, "--prompt-name", "question")
    assert result.exit_code == 2
    names = ", ".join(map(repr, saved_prompts(folder)))   # 'document', 'passage', 'query'
    assert "passage" in names
    assert (f"--prompt-name 'question' is not one of the model folder's prompts ({names}); choose one of "
            "them, or none for no prompt") in result.output
    assert "Traceback" not in result.output


def test_a_prompt_name_for_a_model_without_prompts_is_exit_2_and_none_is_accepted(runner, tmp_path, tiny_model_dir):
    result, _, _ = extract(runner, tmp_path, tiny_model_dir, "--prompt-name", "query")
    assert result.exit_code == 2
    assert (f"--prompt-name 'query': the model {str(tiny_model_dir)!r} declares no prompts (a sentence-transformers "
            "folder lists them in config_sentence_transformers.json); drop --prompt-name") in result.output
    result, features, _ = extract(runner, tmp_path, tiny_model_dir, "--prompt-name", "none")
    assert result.exit_code == 0, result.output


def test_python_messages_name_the_argument(prompt_folder):
    import longbert
    from longbert import ConfigError

    folder, _ = prompt_folder("mean", True)
    names = ", ".join(map(repr, saved_prompts(folder)))
    with pytest.raises(ConfigError, match="^" + re.escape(f"prompt_name='question' is not one of the model folder's "
                                                          f"prompts ({names}); choose one of them, or none for no "
                                                          "prompt") + "$"):
        longbert.encode(["w1"], model=str(folder), cache=None, prompt_name="question")


def test_a_prompt_the_window_cannot_hold_is_exit_2(runner, tmp_path, prompt_folder):
    folder, _ = prompt_folder("mean", True)
    result, _, _ = extract(runner, tmp_path, folder, "--max-length", "4")   # C = 2, the prompt's 2 tokens
    assert result.exit_code == 2
    assert ("the prompt's 2 tokens leave none of a window's 2 content positions (max_length 4); raise --max-length, "
            "or pass --prompt-name none or a shorter prompt") in result.output


def test_the_store_key_holds_the_prompt_and_include_prompt(runner, tmp_path, prompt_folder):
    """Both folders hold the same weights (one sha256) and make the same window ids: only the key's
    include_prompt keeps the second run from reading the first one's vectors."""
    from pipeline.cache.store_keys import pooling_key

    mean = ("mean", (-1,), "mean", 2)
    keys = {pooling_key(*mean), pooling_key(*mean, {"name": "q", "text": "w30 ", "include_prompt": True}),
            pooling_key(*mean, {"name": "q", "text": "w30 ", "include_prompt": False}),
            pooling_key(*mean, {"name": "q", "text": "w31 ", "include_prompt": True})}
    assert len(keys) == 4 and pooling_key(*mean) == '["mean", [2], null]'   # without a prompt: as before
    cache = tmp_path / "store"
    for include in (True, False):
        folder, model = prompt_folder("mean", include)
        result, features, _ = extract(runner, tmp_path, folder, "--strategy", "head", "--cache", cache)
        assert result.exit_code == 0, result.output
        np.testing.assert_allclose(features, reference(model, None), atol=1e-5)


def test_resume_refuses_another_prompt(runner, tmp_path, prompt_folder):
    source, _ = prompt_folder("mean", True)
    folder = tmp_path / "folder"
    shutil.copytree(source, folder)
    src = write_csv(tmp_path / "in.csv", [{"text": words(4 + i)} for i in range(4)])
    args = ["extract", src, "--model", folder, "-o", f"{tmp_path / 'parts'}/", "--block-rows", "2", "--no-progress"]
    assert invoke(runner, args).exit_code == 0
    result = invoke(runner, [*args, "--resume", "--prompt-name", "passage"])
    assert result.exit_code == 2
    assert "--resume: the options differ" in result.output and "--prompt-name: None then, 'passage' now" in result.output
    config = Path(folder) / "config_sentence_transformers.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "default_prompt_name": "passage"}))
    result = invoke(runner, [*args, "--resume"])
    assert result.exit_code == 2
    assert "--resume: the model folder's prompt settings differ from the run that wrote" in result.output
    assert "('w30 w31 ' then, 'w35 ' now)" in result.output


def test_token_vectors_are_the_content_tokens_after_the_prompt(runner, tmp_path, prompt_folder):
    """--level token: each text's token vectors are the folder's own token embeddings without [CLS], the
    prompt's positions and [SEP]."""
    from transformers import AutoTokenizer

    folder, model = prompt_folder("mean", False)
    texts = [words(5), words(12, 4)]
    result, _, _ = extract(runner, tmp_path, folder, "--level", "token", texts=texts)
    assert result.exit_code == 0, result.output
    got = pq.read_table(tmp_path / "out.parquet").column("token_features").to_pylist()
    n_prompt = len(AutoTokenizer.from_pretrained(folder)(PROMPTS["query"], add_special_tokens=False)["input_ids"])
    for text, tokens in zip(texts, got):
        full = model.encode([text], output_value="token_embeddings")[0].numpy()   # (1 + P + n + 1, h)
        np.testing.assert_allclose(np.array(tokens), full[1 + n_prompt:-1], atol=1e-5)
        assert len(tokens) == len(text.split())


@pytest.mark.parametrize("prompt_name, n_prompt", [(None, 2), ("passage", 1), ("none", 0)])
def test_stats_counts_the_windows_extract_makes_with_the_prompt(runner, tmp_path, prompt_folder, prompt_name,
                                                                n_prompt):
    from pipeline.engine.stats import corpus_stats
    from pipeline.options.config import PipelineConfig

    folder, _ = prompt_folder("mean", True)
    csv = write_csv(tmp_path / "in.csv", [{"text": words(100)}, {"text": words(61)}])
    options = {} if prompt_name is None else {"prompt_name": prompt_name}
    cfg = PipelineConfig.from_options(inputs=(str(csv),), model=str(folder), progress=False, **options)
    chunk = corpus_stats(cfg, windows_per_second=1.0)["strategies"]["chunk"]
    c = ST_MAX - 2 - n_prompt                                   # content tokens per window
    want = -(-100 // c) + -(-61 // c)                           # ceil(n / C') windows per document
    assert chunk["windows_total"] == want
    assert chunk["forward_tokens"] == 100 + 61 + want * (2 + n_prompt)
    args = ["--strategy", "chunk", "--level", "window"] + ([] if prompt_name is None else ["--prompt-name", prompt_name])
    result, features, _ = extract(runner, tmp_path, folder, *args, texts=[words(100), words(61)])
    assert result.exit_code == 0, result.output
    assert len(features) == want
