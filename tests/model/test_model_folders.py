"""The model folder as an input: shared cases B46 (a token beyond the embedding table), B47 (half-downloaded
checkpoints), B48 (a WordPiece vocabulary without [UNK]), checkpoints whose tensor names do not match the
model, benign differences that must still load, and a seeded fuzz of model folders."""
from __future__ import annotations

import json
import random
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from conftest import CASES, extract_cli, invoke, run_case_script, write_csv
from families import FAMILY_NAMES, WORDS, build_family
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoTokenizer

from pipeline.model.checkpoint import model_sha256
from pipeline.options.config import ModelConfig
from pipeline.errors import PipelineError
from pipeline.model.load import load_model
from pipeline.model.facts import model_facts
from pipeline.text.tokenize import tokenize_block

CPU = torch.device("cpu")
HAS_POOLER = ("bert", "roberta", "xlm-roberta", "camembert", "albert", "mpnet")


def extract(runner, csv: Path, model: Path, out: Path):
    """conftest.extract_cli from ``csv`` (as it is) with --id-col id to ``out``, without --overwrite and any exit
    code allowed: click's Result."""
    result, _ = extract_cli(out.parent, None, "--id-col", "id", model=model, name=out.name, src=csv, runner=runner,
                            overwrite=False, ok=False)
    return result


def one_line(result) -> str:
    return " ".join(result.output.split())


def case_rows(runner, tmp_path: Path, script: str, model_name: str, csv: str) -> tuple[Path, list[dict]]:
    """The shared case's model made by its script in tmp_path, then its CSV extracted with it (exit 0, no
    traceback): (the model folder, the output rows)."""
    run_case_script(script, tmp_path)
    model = tmp_path / model_name
    out = tmp_path / "o.parquet"
    result = extract(runner, CASES / csv, model, out)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return model, pq.read_table(out).to_pylist()


def direct_mean(model_dir: Path, text: str) -> np.ndarray:
    """Mean of the last hidden states over [CLS] text [SEP], straight from transformers (eager)."""
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0].mean(0).numpy()


# ---------------------------------------------------------------- B46: a token beyond the embedding table

def test_only_the_row_with_a_token_beyond_the_embedding_table_gets_a_row_error(runner, tmp_path):
    model, table = case_rows(runner, tmp_path, "B46.make_model.py", "bert_added_token", "B46.csv")
    assert [r["id"] for r in table] == ["1", "2", "3"]
    assert table[1]["features"] is None
    assert table[1]["error"] == ("token 'covid19' (id 30522) is beyond the model's embedding table of 30,522 rows: "
                                 "the tokenizer has tokens the model was not saved with; resize the model's embeddings "
                                 "(resize_token_embeddings), or remove the token from the tokenizer")
    texts = ["the clinic reopened on monday after the holiday", "schools will stay open during the winter"]
    for row, text in zip((table[0], table[2]), texts):
        assert row["error"] is None
        np.testing.assert_allclose(np.asarray(row["features"], np.float32), direct_mean(model, text), atol=1e-5)


def test_a_special_token_beyond_the_table_is_refused_before_loading(runner, tmp_path, monkeypatch):
    import pipeline.model.encode

    folder = build_family("bert", tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    tok = AutoTokenizer.from_pretrained(folder)
    config["vocab_size"] = tok.sep_token_id  # [SEP] (and all after it) beyond the table
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(folder / "model.safetensors")
    key = "embeddings.word_embeddings.weight"
    tensors[key] = tensors[key][:tok.sep_token_id].contiguous()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.setattr(pipeline.model.encode, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    result = extract(runner, CASES / "B46.csv", folder, tmp_path / "o.parquet")
    assert result.exit_code == 2
    assert (f"Error: --model {str(folder)!r}: the tokenizer's last token '[SEP]' has id {tok.sep_token_id}, beyond "
            f"the model's embedding table of {tok.sep_token_id} rows (config.json vocab_size), and every window uses "
            "it; use the tokenizer saved with this model, or resize the model's embeddings to the tokenizer "
            "(resize_token_embeddings) and save both") in one_line(result)
    assert not (tmp_path / "o.parquet").exists()


# ---------------------------------------------------------------- B47: half-downloaded checkpoints

@pytest.fixture(scope="module")
def b47(tmp_path_factory):
    out = tmp_path_factory.mktemp("b47")
    run_case_script("B47.make_models.py", out)
    return out


@pytest.mark.parametrize("name,message", [
    ("bert_cut_weights", "model.safetensors in {d} is cut or damaged (cut: its tensors need 4,031,400 data bytes, "
                         "the file holds 2,013,644); download or copy the model folder again"),
    ("bert_cut_header", "model.safetensors in {d} is cut or damaged (its header says 4,104 bytes, the file holds 92 "
                        "after the length); download or copy the model folder again"),
    ("bert_missing_shard", "the shard model-00002-of-00002.safetensors that model.safetensors.index.json names is "
                           "missing from {d}; download or copy the model folder again (every shard the index names)"),
    ("bert_cut_config", "config.json in {d} is cut or damaged (not valid JSON: Unterminated string starting at: "
                        "line 10 column 3 (char 193)); download or copy the model folder again"),
])
def test_half_downloaded_checkpoint_exits_2_naming_the_file(runner, tmp_path, b47, name, message):
    folder = b47 / name
    out = tmp_path / "o.parquet"
    result = extract(runner, CASES / "B47.csv", folder, out)
    assert result.exit_code == 2, result.output
    assert f"Error: --model {str(folder)!r}: " + message.format(d=folder) in one_line(result)
    assert "hub" not in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_whole_checkpoint_runs(runner, tmp_path, b47):
    out = tmp_path / "o.parquet"
    result = extract(runner, CASES / "B47.csv", b47 / "bert_whole", out)
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out).to_pylist()
    np.testing.assert_allclose(np.asarray(rows[0]["features"], np.float32),
                               direct_mean(b47 / "bert_whole", "the report was filed on time"), atol=1e-5)


# ---------------------------------------------------------------- B48: WordPiece without [UNK]

def test_wordpiece_without_unk_gives_a_row_error_for_the_unknown_word_only(runner, tmp_path):
    model, rows = case_rows(runner, tmp_path, "B48.make_model.py", "wordpiece_no_unk", "B48.csv")
    assert [r["id"] for r in rows] == ["1", "2", "3"]
    assert rows[1]["features"] is None and rows[1]["n_tokens"] == 0
    assert rows[1]["error"] == ("the tokenizer failed on this text (WordPiece error: Missing [UNK] token from the "
                                "vocabulary): its vocabulary has no entry for the unknown token '[UNK]', so a word it "
                                "lacks cannot be tokenized; add the entry to the vocabulary, or use a tokenizer that "
                                "has it")
    for row, text in zip((rows[0], rows[2]), ("the river rose after the rain.", "a river rose.")):
        assert row["error"] is None
        np.testing.assert_allclose(np.asarray(row["features"], np.float32), direct_mean(model, text), atol=1e-5)


# ---------------------------------------------------------------- tensor names that do not match the model

def rewrite(folder: Path, change) -> None:
    """Apply ``change(dict of tensors) -> dict`` to model.safetensors."""
    tensors = load_file(folder / "model.safetensors")
    save_file(change(tensors), folder / "model.safetensors", metadata={"format": "pt"})


def test_checkpoint_under_a_prefix_is_refused_naming_missing_weights_and_the_prefix(runner, tmp_path):
    folder = build_family("bert", tmp_path / "m")
    rewrite(folder, lambda t: {"backbone." + k: v for k, v in t.items()})
    out = tmp_path / "o.parquet"
    result = extract(runner, CASES / "B47.csv", folder, out)
    assert result.exit_code == 2
    assert (f"Error: --model {str(folder)!r}: 37 of the model's 39 weights are not in model.safetensors "
            "(embeddings.word_embeddings.weight, embeddings.position_embeddings.weight, "
            "embeddings.token_type_embeddings.weight, ... 34 more), so they would be random; the checkpoint stores "
            "them under the prefix 'backbone.', which the model does not use. Save the model with transformers' "
            "save_pretrained under its own parameter names, or download or copy the model folder again"
            ) in one_line(result)
    assert not out.exists()


@pytest.mark.parametrize("change,message", [
    (lambda t: {k: v for k, v in t.items() if k != "encoder.layer.1.output.dense.weight"},
     "1 of the model's 39 weights are not in model.safetensors (encoder.layer.1.output.dense.weight), so they "
     "would be random. Use the config.json saved with these weights (its model_type and sizes), or download or copy "
     "the model folder again"),
    (lambda t: {**t, "encoder.layer.2.output.dense.weight": t["encoder.layer.1.output.dense.weight"].clone()},
     "model.safetensors holds 1 tensors the model its config.json describes does not have "
     "(encoder.layer.2.output.dense.weight)"),
    (lambda t: {**t, "encoder.layer.0.output.dense.bias": torch.zeros(33)},
     "config.json does not match the weights in model.safetensors (1 weights differ: "
     "encoder.layer.0.output.dense.bias: stored (33,), config.json gives (32,))"),
    (lambda t: {**t, "encoder.layer.0.output.dense.bias": torch.zeros(32, dtype=torch.int32)},
     "config.json does not match the weights in model.safetensors (1 weights differ: "
     "encoder.layer.0.output.dense.bias: stored as I32, a weight needs floating point)"),
])
def test_missing_foreign_or_mismatched_tensors_are_refused(tmp_path, change, message):
    folder = build_family("bert", tmp_path / "m")
    rewrite(folder, change)
    with pytest.raises(PipelineError) as err:
        load_model(ModelConfig(model=str(folder)), need_pooler=False, device=CPU)
    assert err.value.exit_code == 2
    assert f"--model {str(folder)!r}: {message}" in str(err.value)


def test_benign_differences_load_with_every_weight_from_the_checkpoint(tmp_path):
    """A task checkpoint ("bert." prefix, a masked-LM head), an old position_ids buffer, and no pooler when the
    pooler is not used: the model loads, and each weight equals the stored one."""
    folder = build_family("bert", tmp_path / "m")
    intact = load_file(folder / "model.safetensors")

    def task(t):
        kept = {"bert." + k: v for k, v in t.items() if not k.startswith("pooler.")}
        return {**kept, "bert.embeddings.position_ids": torch.arange(64)[None], "cls.predictions.bias": torch.zeros(70)}

    rewrite(folder, task)
    model = load_model(ModelConfig(model=str(folder)), need_pooler=False, device=CPU)
    state = model.state_dict()
    for key, value in intact.items():
        if not key.startswith("pooler."):
            assert torch.equal(state[key], value), key
    with pytest.raises(PipelineError, match="pooler.dense.weight, pooler.dense.bias"):
        load_model(ModelConfig(model=str(folder)), need_pooler=True, device=CPU)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("pooler", [True, False])
def test_every_family_still_loads_with_the_checkpoint_weights(tmp_path, family, pooler):
    if not pooler and family not in HAS_POOLER:
        pytest.skip("no pooler layer to leave out")
    folder = build_family(family, tmp_path / family, pooler=pooler)
    cfg = ModelConfig(model=str(folder))
    facts, _ = model_facts(cfg)
    assert facts.vocab_rows is None
    model = load_model(cfg, need_pooler=False, device=CPU)
    state = model.state_dict()
    with safe_open(folder / "model.safetensors", "pt") as fh:
        for key in fh.keys():
            assert torch.equal(state[key], fh.get_tensor(key)), key


def test_the_default_model_passes_the_checks(default_model_dir):
    cfg = ModelConfig(model=str(default_model_dir))
    facts, _ = model_facts(cfg)
    assert facts.vocab_rows is None and facts.family == "bert"
    model = load_model(cfg, need_pooler=False, device=CPU)
    with safe_open(default_model_dir / "model.safetensors", "pt") as fh:
        key = next(k for k in fh.keys() if k.endswith("word_embeddings.weight"))
        assert torch.equal(model.state_dict()[key.split("bert.", 1)[-1]], fh.get_tensor(key))


# ---------------------------------------------------------------- fuzz: seeded corruptions of model folders

FUZZ_FOLDERS = ("bert", "roberta", "distilbert", "bert_sharded")
PER_FOLDER = 130       # 4 folders x 130 = 520 corruptions
PROBE = [" ".join(WORDS[i:i + 6]) for i in range(0, 36, 6)] + ["a b c d e f g h"]
SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "max_position_embeddings",
             "type_vocab_size", "dim", "n_layers", "hidden_dim", "model_type")


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    """{name: (folder, probe token ids per text, a probe window's ids, its last hidden states, sha256)}."""
    base = tmp_path_factory.mktemp("fuzz_intact")
    folders = {f: build_family(f, base / f) for f in FUZZ_FOLDERS[:3]}
    sharded = base / "bert_sharded"
    AutoModel.from_pretrained(folders["bert"]).save_pretrained(sharded, max_shard_size="20KB")
    for file in folders["bert"].glob("tokenizer*"):
        shutil.copy(file, sharded / file.name)
    assert len(list(sharded.glob("model-*.safetensors"))) >= 2
    folders["bert_sharded"] = sharded
    out = {}
    for name, folder in folders.items():
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
        ids = [tok(t, add_special_tokens=False)["input_ids"] for t in PROBE]
        window = [tok.cls_token_id, *tok("w1 w2 w3 a b w39 c h", add_special_tokens=False)["input_ids"], tok.sep_token_id]
        out[name] = (folder, ids, window, hidden(model, window), model_sha256(folder))
    return out


def hidden(model, window: list[int]) -> torch.Tensor:
    """(1, 10, H) last hidden states of one probe window (the intact tokenizer's ids)."""
    ids = torch.tensor([window])
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state


def corrupt(folder: Path, rng: random.Random) -> tuple[str, str]:
    """Damage ``folder`` in place, one way drawn by ``rng``. Returns (kind, the file touched)."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    how = rng.choice(["truncate", "flip", "delete", "rename", "config", "vocab", "index"])
    if how == "index" and not (folder / "model.safetensors.index.json").exists():
        how = "rename"
    if how == "truncate":
        file = rng.choice(files)
        size = file.stat().st_size
        with open(file, "r+b") as fh:
            fh.truncate(rng.randrange(size) if size else 0)
        return "strict", file.name
    if how == "flip":
        file = rng.choice([p for p in files if p.suffix == ".safetensors"])
        data = bytearray(file.read_bytes())
        header_end = 8 + struct.unpack("<Q", bytes(data[:8]))[0]
        at = rng.randrange(len(data))
        data[at] ^= rng.randrange(1, 256)
        file.write_bytes(bytes(data))
        return ("data" if at >= header_end else "strict"), file.name
    if how == "delete":
        file = rng.choice(files)
        file.unlink()
        return "strict", file.name
    if how == "rename":
        file = rng.choice([p for p in files if p.suffix == ".safetensors"])
        tensors = load_file(file)
        key = rng.choice(sorted(tensors))
        new = rng.choice([f"backbone.{key}", key.replace(".", "_", 1), key.replace("0", "7"), key + "x", None,
                          "encoder.layer.9.output.dense.weight", "cls.head.weight"])
        value = tensors.pop(key)
        if new is not None:
            tensors[new] = value
        if new == "cls.head.weight":
            tensors[new], tensors[key] = value.clone(), value  # a task head beside the encoder: benign
        save_file(tensors, file, metadata={"format": "pt"})
        if (folder / "model.safetensors.index.json").exists():  # keep the index consistent with the shard
            index = json.loads((folder / "model.safetensors.index.json").read_text())
            index["weight_map"] = {k: v for k, v in index["weight_map"].items() if k != key}
            index["weight_map"].update({k: file.name for k in tensors})
            (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        return "strict", file.name
    if how == "config":
        config = json.loads((folder / "config.json").read_text())
        key = rng.choice([k for k in SIZE_KEYS if k in config])
        value = config[key]
        if key == "model_type":
            config[key] = rng.choice(["bert", "roberta", "electra", "distilbert", "gpt2", "t5", "nonsense"])
        else:
            config[key] = rng.choice([value + 1, value - 1, 0, -1, str(value), value + 0.5, None, 2 * value])
        (folder / "config.json").write_text(json.dumps(config))
        return "strict", "config.json"
    if how == "vocab":
        data = json.loads((folder / "tokenizer.json").read_text())
        vocab = data["model"]["vocab"]
        dropped = rng.choice(sorted(vocab))
        del vocab[dropped]
        (folder / "tokenizer.json").write_text(json.dumps(data))
        return "vocab:" + dropped, "tokenizer.json"
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    key = rng.choice(sorted(data["weight_map"]))
    shards = sorted(set(data["weight_map"].values()))
    data["weight_map"][key] = rng.choice([s for s in shards if s != data["weight_map"][key]] + ["model-x.safetensors"])
    index.write_text(json.dumps(data))
    return "strict", index.name


def attempt(folder: Path):
    """(facts, tokenizer, model) loaded as a run does, or the PipelineError a run would end with."""
    cfg = ModelConfig(model=str(folder))
    try:
        facts, tok = model_facts(cfg)
        return (facts, tok, load_model(cfg, need_pooler=False, device=CPU)), None
    except PipelineError as err:
        return None, err


def check_outcome(name: str, intact, folder: Path, kind: str, touched: str) -> str:
    """Assert a corrupted folder either loads right or is refused clearly; returns 'ok' or 'refused'."""
    good, ids, window, states, sha = intact[name]
    loaded, err = attempt(folder)
    if err is not None:
        text = str(err)
        assert err.exit_code == 2, text
        assert str(folder) in text and "hub" not in text, text
        named = touched in text or (touched == "tokenizer_config.json" and "tokenizer" in text)
        assert named or "model_type" in text or "family" in text or touched.endswith(".safetensors") and (
            ".safetensors" in text), (kind, touched, text)
        return "refused"
    facts, tok, model = loaded
    docs = tokenize_block(PROBE, tok, vocab_rows=facts.vocab_rows)
    if kind.startswith("vocab:"):  # a smaller vocabulary: texts without the dropped entry are unchanged
        dropped = good_vocab_id(good, kind[6:])
        for doc, want in zip(docs, ids):
            if dropped not in want and doc.error is None:
                assert doc.ids.tolist() == want, (kind, doc)
    else:
        assert [d.ids.tolist() for d in docs] == ids, (kind, touched, folder.name)
    if kind == "data":  # a flipped byte in tensor data: no checksum can tell, but the identity changes
        assert model_sha256(folder) != sha
        return "ok"
    torch.testing.assert_close(hidden(model, window), states, atol=1e-5, rtol=1e-4, msg=f"{kind} {touched} {folder.name}")
    return "ok"


def good_vocab_id(folder: Path, token: str) -> int:
    return json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"][token]


def test_fuzz_model_folders_end_in_a_correct_load_or_a_clear_exit_2(intact, tmp_path):
    started, cpu = time.perf_counter(), time.process_time()
    counts: dict[str, int] = {}
    for name in FUZZ_FOLDERS:
        rng = random.Random(f"model-folder-{name}")
        for i in range(PER_FOLDER):
            folder = tmp_path / f"{name}_{i}"
            shutil.copytree(intact[name][0], folder)
            kind, touched = corrupt(folder, rng)
            outcome = check_outcome(name, intact, folder, kind, touched)
            counts[outcome] = counts.get(outcome, 0) + 1
            shutil.rmtree(folder)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"{sum(counts.values())} corrupted model folders in {seconds:.1f} s ({cpu:.1f} s of CPU): {counts}")
    assert sum(counts.values()) >= 500 and counts.get("refused", 0) > 250 and counts.get("ok", 0) > 20


@pytest.mark.parametrize("damage,message", [
    (lambda d: (d / "tokenizer.json").write_text('{"version": "1.0", "trunc'),
     "tokenizer.json in {d} is cut or damaged (not valid JSON: Unterminated string starting at: line 1 column 20 "
     "(char 19)); download or copy the model folder again"),
    (lambda d: (d / "model.safetensors").unlink(),
     "{d} holds no weights (model.safetensors, or its shards and model.safetensors.index.json); download or copy "
     "the model folder again"),
    (lambda d: (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()),
                                                           "hidden_size": "32"})),
     "config.json gives hidden_size = '32', not a positive integer; use the config.json saved with the model, or "
     "download or copy the model folder again"),
    (lambda d: (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()),
                                                           "model_type": "roberta"})),
     "config.json gives model_type 'roberta' but its architectures are ['BertModel'], of another family; use the "
     "config.json saved with the model, or download or copy the model folder again"),
])
def test_fuzz_kinds_end_to_end_exit_2_with_nothing_written(runner, tmp_path, damage, message):
    folder = build_family("bert", tmp_path / "m")
    damage(folder)
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}]), "--model", folder,
                             "-o", out])
    assert result.exit_code == 2, result.output
    assert f"Error: --model {str(folder)!r}: " + message.format(d=folder) in one_line(result)
    assert not out.exists()


def test_tokenizer_json_read_as_another_kind_without_its_config_is_refused(runner, tmp_path):
    folder = build_family("roberta", tmp_path / "m")
    (folder / "tokenizer_config.json").unlink()
    result = invoke(runner, ["extract", write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}]), "--model", folder,
                             "-o", tmp_path / "o.parquet"])
    assert result.exit_code == 2, result.output
    assert (f"Error: --model {str(folder)!r}: {folder} has no tokenizer_config.json, and without it its "
            "tokenizer.json (WordPiece) loads as another tokenizer (BPE); download or copy the model folder again "
            "with its tokenizer_config.json") in one_line(result)


@pytest.mark.parametrize("change,message", [
    (lambda t: {"backbone." + k: v for k, v in t.items()}, "37 of the model's 39 weights are not in pytorch_model.bin"),
    (lambda t: {**t, "encoder.layer.0.output.dense.bias": torch.zeros(33)},
     "config.json does not match the weights in pytorch_model.bin (1 weights differ: encoder.layer.0.output.dense.bias: "
     "stored (33,), config.json gives (32,))"),
])
def test_pickle_checkpoint_checked_from_the_loading_report(runner, tmp_path, change, message):
    folder = build_family("bert", tmp_path / "m")
    torch.save(change(load_file(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    out = tmp_path / "o.parquet"
    result = invoke(runner, ["extract", write_csv(tmp_path / "in.csv", [{"text": "w1 w2"}]), "--model", folder,
                             "--allow-pickle", "-o", out])
    assert result.exit_code == 2, result.output
    assert f"Error: --model {str(folder)!r}: {message}" in one_line(result)
    assert not out.exists()
