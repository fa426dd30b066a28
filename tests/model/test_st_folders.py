"""sentence-transformers folders (modules.json): their declared pooling, Normalize and max_seq_length are used
when no option is given, equal to the folder's own SentenceTransformer.encode; what cannot be applied is refused."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import extract_features, words

st = pytest.importorskip("sentence_transformers")

TEXTS = [words(5), words(17, 3), words(40, 7), "w1"]   # each fits one window of 64 positions
ST_MAX = 64                                              # the folders' max_seq_length


def save_st(tiny_model_dir: Path, out: Path, pooling: str, normalize: bool, dense: bool = False) -> Path:
    """A sentence-transformers folder saved by sentence-transformers itself around the tiny BERT."""
    from sentence_transformers import SentenceTransformer, models

    t = models.Transformer(str(tiny_model_dir), max_seq_length=ST_MAX)
    modules = [t, models.Pooling(32, pooling_mode=pooling)]
    if dense:
        torch.manual_seed(1)
        modules.append(models.Dense(32, 8))
    if normalize:
        modules.append(models.Normalize())
    SentenceTransformer(modules=modules).save(str(out))
    return out


@pytest.fixture(scope="module")
def st_folder(tiny_model_dir, tmp_path_factory):
    """(pooling, normalize) -> (folder, its own SentenceTransformer(folder).encode(TEXTS)), built once each."""
    from sentence_transformers import SentenceTransformer

    built: dict = {}

    def make(pooling: str, normalize: bool):
        if (pooling, normalize) not in built:
            folder = save_st(tiny_model_dir, tmp_path_factory.mktemp(f"st_{pooling}_{normalize}"), pooling, normalize)
            built[pooling, normalize] = folder, SentenceTransformer(str(folder), device="cpu").encode(TEXTS)
        return built[pooling, normalize]
    return make


def extract(runner, tmp_path, model, *args, texts=TEXTS):
    """conftest.extract_features on ``texts``: (result, features (n, D) or None, metadata or None)."""
    return extract_features(tmp_path, model, texts, *args, runner=runner)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_without_pooling_options_the_vectors_equal_the_folders_own_encode(runner, tmp_path, st_folder, pooling,
                                                                          normalize):
    folder, reference = st_folder(pooling, normalize)
    result, features, meta = extract(runner, tmp_path, folder)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(features, reference, atol=1e-5)
    assert (meta["pooling"], meta["normalize"], meta["max_length"]) == (pooling, normalize, ST_MAX)
    settings = meta["folder_settings"]
    assert settings["from_folder"] == ["max_length", "normalize", "pooling"] and settings["overridden"] == {}
    saved = json.loads((Path(folder) / "config_sentence_transformers.json").read_text())
    assert settings["declared"] == {"pooling": pooling, "normalize": normalize, "max_length": ST_MAX,
                                    "include_prompt": True, "do_lower_case": False, "default_prompt": None,
                                    "prompts": saved.get("prompts", {}), "default_prompt_name": None}
    assert (settings["prompt_applied"], settings["prompt"]) == (False, None)
    assert settings["lowercased"] is False
    assert "differ" not in result.stdout


def test_python_encode_uses_the_declared_settings_too(st_folder):
    import longbert

    folder, reference = st_folder("cls", True)
    vectors = longbert.encode(TEXTS, model=str(folder), device="cpu", cache=None)
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
    mean = longbert.encode(TEXTS, model=str(folder), device="cpu", cache=None, pooling="mean", normalize=False)
    assert np.abs(np.linalg.norm(mean, axis=1) - 1).max() > 1e-3   # the options given win


def test_options_that_differ_from_the_folder_are_named_once_in_the_summary(runner, tmp_path, st_folder, tiny_bert):
    folder, _ = st_folder("cls", True)
    result, features, meta = extract(runner, tmp_path, folder, "--pooling", "mean", "--no-normalize",
                                     "--max-length", "512")
    assert result.exit_code == 0, result.output
    note = ("--pooling mean and --no-normalize and --max-length 512 differ from what the model folder declares "
            "(cls pooling, Normalize, max_seq_length 128); the options were used")
    note = note.replace("max_seq_length 128", f"max_seq_length {ST_MAX}")
    assert result.stdout.count(note) == 1
    assert meta["folder_settings"]["overridden"] == {"pooling": ["mean", "cls"], "normalize": [False, True],
                                                     "max_length": [512, ST_MAX]}
    assert meta["folder_settings"]["from_folder"] == []
    model, tok = tiny_bert
    with torch.no_grad():
        for text, got in zip(TEXTS, features):
            enc = tok(text, return_tensors="pt")
            want = model(**enc).last_hidden_state[0].mean(0).numpy()   # plain mean, no Normalize
            np.testing.assert_allclose(got, want, atol=1e-5)


def test_folder_settings_ignore_keeps_longberts_own_defaults(runner, tmp_path, st_folder, tiny_bert):
    folder, _ = st_folder("cls", True)
    result, features, meta = extract(runner, tmp_path, folder, "--folder-settings", "ignore")
    assert result.exit_code == 0, result.output
    assert (meta["pooling"], meta["normalize"], meta["folder_settings"]["in_force"]) == ("mean", False, False)
    model, tok = tiny_bert
    with torch.no_grad():
        want = model(**tok(TEXTS[0], return_tensors="pt")).last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(features[0], want, atol=1e-5)


def test_a_dense_module_is_refused_before_loading_and_accepted_with_pooling(runner, tmp_path, tiny_model_dir,
                                                                            tiny_bert, monkeypatch):
    folder = save_st(tiny_model_dir, tmp_path / "st_dense", "mean", normalize=True, dense=True)
    import pipeline.model.load as load

    def no_load(*args, **kwargs):
        raise AssertionError("the weights were loaded")
    monkeypatch.setattr(load, "load_model", no_load)
    result, _, _ = extract(runner, tmp_path, folder)
    assert result.exit_code == 2
    assert result.stderr == (f"Error: --model {str(folder)!r} is a sentence-transformers folder whose modules.json "
                             "declares the module 2_Dense (Dense) after the transformer, which longbert cannot "
                             "apply, so its vectors would not be the folder's; pass --pooling cls, mean or max to "
                             "take the transformer's own output pooled that way (without that module)\n")
    monkeypatch.undo()
    result, features, meta = extract(runner, tmp_path, folder, "--pooling", "mean")
    assert result.exit_code == 0, result.output
    assert features.shape[1] == 32 and meta["folder_settings"]["from_folder"] == ["max_length"]
    model, tok = tiny_bert
    with torch.no_grad():
        want = model(**tok(TEXTS[1], return_tensors="pt")).last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(features[1], want, atol=1e-5)   # the raw transformer, not Dense, not normalized


def test_an_early_layout_loads_the_transformer_from_its_sub_folder(runner, tmp_path, st_folder):
    source, reference = st_folder("cls", True)
    folder = Path(shutil.copytree(source, tmp_path / "early"))
    (folder / "0_BERT").mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "sentence_bert_config.json"):
        shutil.move(folder / name, folder / "0_BERT" / name)
    (folder / "0_BERT" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": ST_MAX}))
    modules = json.loads((folder / "modules.json").read_text())
    modules[0].update(path="0_BERT", type="sentence_transformers.models.BERT")
    (folder / "modules.json").write_text(json.dumps(modules))
    result, features, meta = extract(runner, tmp_path, folder)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(features, reference, atol=1e-5)
    assert meta["folder_settings"]["transformer"] == "0_BERT" and meta["max_length"] == ST_MAX


def test_a_tokenizer_config_limit_is_named_with_the_way_past_it(runner, tmp_path, tiny_model_dir):
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "bert128"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 128}))
    result, _, _ = extract(runner, tmp_path, folder, "--max-length", "512")
    assert result.exit_code == 2
    assert result.stderr == (f"Error: --max-length=512 exceeds the 128 positions that the tokenizer allows "
                             f"(model_max_length in {folder}/tokenizer_config.json; the model's position table "
                             "serves 512); use --max-length 128 or less, or, to pass up to the model's 512 "
                             "positions, set \"model_max_length\": 512 in that tokenizer_config.json\n")


def test_max_seq_length_is_a_default_not_a_cap_below_the_models_positions(runner, tmp_path, st_folder, tiny_bert):
    folder, _ = st_folder("mean", False)
    assert json.loads((folder / "tokenizer_config.json").read_text())["model_max_length"] == ST_MAX  # as ST writes it
    long_text = words(100)
    result, features, meta = extract(runner, tmp_path, folder, "--max-length", "512", texts=[long_text])
    assert result.exit_code == 0, result.output
    assert meta["max_length"] == 512
    model, tok = tiny_bert
    with torch.no_grad():
        want = model(**tok(long_text, return_tensors="pt")).last_hidden_state[0].mean(0).numpy()  # 102 positions
    np.testing.assert_allclose(features[0], want, atol=1e-5)
    result, _, _ = extract(runner, tmp_path, folder, "--max-length", "513", texts=[long_text])
    assert result.exit_code == 2
    assert result.stderr == "Error: --max-length=513 exceeds the model's 512 positions; use --max-length 512 or less\n"


def test_a_folder_without_tokenizer_files_is_exit_2_naming_them(runner, tmp_path, tiny_model_dir):
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "no_tokenizer"))
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.txt").unlink()
    result, _, _ = extract(runner, tmp_path, folder)
    assert result.exit_code == 2
    assert result.stderr == (f"Error: --model {str(folder)!r}: {folder} has no tokenizer files: tokenizer.json and "
                             "vocab.txt are both missing (nor is there vocab.json with merges.txt, or a sentencepiece "
                             "model); copy the tokenizer files saved with the model into the folder, or download or "
                             "copy the model folder again\n")


def test_a_sentencepiece_tokenizer_without_the_package_names_the_package(runner, tmp_path, monkeypatch):
    from transformers import DebertaV2Config

    folder = tmp_path / "deberta_v3"
    DebertaV2Config(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=37).save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer"}))
    (folder / "spm.model").write_bytes(b"\x0a\x00")   # never read: the check comes first
    import pipeline.model.tokenizer_files as files

    monkeypatch.setattr(files, "has_package", lambda module: module != "sentencepiece")
    result, _, _ = extract(runner, tmp_path, folder)
    assert result.exit_code == 2
    assert result.stderr == (f"Error: --model {str(folder)!r}: {folder} has no tokenizer.json, and its tokenizer is "
                             "the sentencepiece model spm.model, which needs the optional package sentencepiece to "
                             "read: pip install sentencepiece\n")


@pytest.mark.slow
def test_the_bundled_model_keeps_mean_pooling_unless_its_declared_settings_are_asked_for(runner, tmp_path,
                                                                                        default_model_dir):
    from sentence_transformers import SentenceTransformer

    texts = ["the river flooded the old town", "a court heard the case and the judge gave a verdict"]
    result, features, meta = extract(runner, tmp_path, "default", texts=texts)
    assert result.exit_code == 0, result.output
    assert (meta["pooling"], meta["normalize"], meta["max_length"]) == ("mean", False, 512)
    assert meta["folder_settings"]["in_force"] is False and meta["folder_settings"]["from_folder"] == []
    assert np.abs(np.linalg.norm(features, axis=1) - 1).max() > 1e-2   # not normalized
    result, declared, meta = extract(runner, tmp_path, "default", "--folder-settings", "declared", texts=texts)
    assert result.exit_code == 0, result.output
    assert (meta["pooling"], meta["normalize"], meta["max_length"]) == ("mean", True, 256)
    reference = SentenceTransformer(str(default_model_dir), device="cpu").encode(texts)
    np.testing.assert_allclose(declared, reference, atol=1e-5)
    np.testing.assert_allclose(declared, features / np.linalg.norm(features, axis=1, keepdims=True), atol=1e-5)


CASED_TEXTS = ["Ab Cd eF", "GH ab AB cd", "x", "İa Ab"]   # "İ" lowers to 2 characters


@pytest.fixture(scope="module")
def cased_folder(tmp_path_factory):
    """A sentence-transformers folder over a cased WordPiece tokenizer (upper- and lowercase pieces with
    their own ids), saved by sentence-transformers with do_lower_case=True, and its own encode."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    base = tmp_path_factory.mktemp("cased_bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghxi", *"ABCDEFGHXI", "\u0307", "##\u0307",
             *[f"##{c}" for c in "abcdefghxiABCDEFGHXI"]]
    (base / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast.from_pretrained(base, do_lower_case=False, strip_accents=False)
    assert len(tok) == len(vocab)  # a wrong load gives 5
    torch.manual_seed(3)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64)).eval().save_pretrained(base)
    tok.save_pretrained(base)
    out = tmp_path_factory.mktemp("st_cased")
    t = models.Transformer(str(base), max_seq_length=ST_MAX)
    SentenceTransformer(modules=[t, models.Pooling(32, pooling_mode="mean")]).save(str(out))
    # as sentence-transformers before 6 saved it (the hub's folders): the flag in sentence_bert_config.json
    config = out / "sentence_bert_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_lower_case": True}))
    return out, base, SentenceTransformer(str(out), device="cpu").encode(CASED_TEXTS)


def test_a_folders_do_lower_case_lowercases_the_text_as_its_own_encode_does(runner, tmp_path, cased_folder):
    folder, base, reference = cased_folder
    result, features, meta = extract(runner, tmp_path, folder, texts=CASED_TEXTS)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(features, reference, atol=1e-5)
    assert meta["folder_settings"]["declared"]["do_lower_case"] is True
    assert meta["folder_settings"]["lowercased"] is True
    assert "texts lowercased before the tokenizer, as the model folder declares (do_lower_case)" in result.stdout
    # the same text without the folder's settings is tokenized as written: other ids, other vectors
    result, raw, meta = extract(runner, tmp_path, folder, "--folder-settings", "ignore", texts=CASED_TEXTS)
    assert result.exit_code == 0 and meta["folder_settings"]["lowercased"] is False
    assert np.abs(raw - reference).max() > 1e-3


def test_lowercased_tokens_keep_offsets_into_the_text_as_read(cased_folder):
    from transformers import AutoTokenizer

    from longbert import Batch, Tokenize

    _, base, _ = cased_folder
    tok = AutoTokenizer.from_pretrained(base)
    doc = Tokenize(tok, with_offsets=True, lowercase=True)(Batch.from_texts(["İa Ab"])).docs[0]
    direct = tok("i̇a ab", add_special_tokens=False)["input_ids"]
    assert doc.ids.tolist() == direct
    # "İ" (1 character as read) lowers to "i" + U+0307: both pieces point into [0, 1) of the text as read
    assert doc.offsets.tolist() == [[0, 1], [0, 1], [1, 2], [3, 4], [4, 5]]


def test_a_folders_default_prompt_is_applied_named_in_the_summary_and_matches_its_encode(runner, tmp_path, st_folder):
    from sentence_transformers import SentenceTransformer

    source, _ = st_folder("mean", False)
    folder = tmp_path / "prompted"
    shutil.copytree(source, folder)
    config = folder / "config_sentence_transformers.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "prompts": {"query": "w3 w4 ", "passage": ""},
                                  "default_prompt_name": "query"}))
    reference = SentenceTransformer(str(folder), device="cpu").encode(TEXTS)   # the prompt prepended
    result, features, meta = extract(runner, tmp_path, folder)
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(features, reference, atol=1e-5)
    settings = meta["folder_settings"]
    assert settings["declared"]["default_prompt"] == "w3 w4 "
    assert (settings["prompt_applied"], settings["prompt"]) == (True, {"name": "query", "text": "w3 w4 ",
                                                                       "include_prompt": True})
    assert "the model folder's prompt 'query' ('w3 w4 ') put after [CLS] in every window" in result.stdout
    assert "does not prepend" not in result.stdout
    # the prompt's own text at the start of each text, without the folder's prompt, gives the same vectors
    result, typed, meta = extract(runner, tmp_path, folder, "--prompt-name", "none",
                                  texts=["w3 w4 " + t for t in TEXTS])
    assert meta["folder_settings"]["prompt_applied"] is False
    np.testing.assert_allclose(typed, reference, atol=1e-5)
