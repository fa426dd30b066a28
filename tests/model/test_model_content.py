"""A model is known by its files, not by its path: a folder saved again in place is loaded again by the
Python API, refused by a pipeline that checked the old files, and refused by --resume."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from conftest import invoke, reference_vectors, words, write_csv
from transformers import BertConfig, BertModel, BertTokenizerFast

import longbert
from pipeline.errors import ModelError
from pipeline.model.checkpoint import model_sha256


def _save_again(folder, seed: int) -> BertModel:
    """Write new random weights into ``folder`` in place (the same config), as a user re-saving it would."""
    torch.manual_seed(seed)
    model = BertModel(BertConfig.from_pretrained(folder)).eval()
    model.save_pretrained(folder)
    stamp = os.stat(folder / "config.json").st_mtime_ns + 10_000_000   # a later mtime, even on a coarse clock
    for name in ("config.json", "model.safetensors"):
        os.utime(folder / name, ns=(stamp, stamp))
    return model


@pytest.fixture
def folder(tiny_model_dir, tmp_path):
    return shutil.copytree(tiny_model_dir, tmp_path / "model")


def test_encode_loads_a_folder_saved_again_in_place(folder):
    tok = BertTokenizerFast.from_pretrained(folder)
    text = words(9)
    ids = [[tok.cls_token_id, *tok(text, add_special_tokens=False)["input_ids"], tok.sep_token_id]]
    first = longbert.encode([text], model=str(folder), pooling="cls")
    np.testing.assert_allclose(first[0], reference_vectors(BertModel.from_pretrained(folder).eval(), tok, ids)[0],
                               atol=1e-5)
    new = _save_again(folder, seed=7)
    second = longbert.encode([text], model=str(folder), pooling="cls")
    np.testing.assert_allclose(second[0], reference_vectors(new, tok, ids)[0], atol=1e-5)
    assert not np.allclose(first, second, atol=1e-3)


def test_a_pipeline_refuses_weights_that_changed_after_its_options_were_checked(folder):
    pipe = longbert.Pipeline.from_options(model=str(folder))
    then = pipe.resolution().facts.sha256
    _save_again(folder, seed=8)
    now = model_sha256(folder)
    for _ in range(2):   # the same every time: the message says what works instead
        with pytest.raises(ModelError) as err:
            pipe(longbert.Batch.from_texts([words(5)]))
        assert str(err.value) == (
            f"the model folder {str(folder)!r} was saved again after this pipeline's options were checked: its "
            f"files' sha256 was {then[:12]}... then and is {now[:12]}... now, and this pipeline keeps the old one; "
            f"build the pipeline again from the folder (longbert.Pipeline.from_options(model={str(folder)!r}, "
            "...) in Python, or a new `longbert extract` run)")
    _works_when_built_again(folder)


def _works_when_built_again(folder) -> None:
    """What the message advises: a pipeline built again from the folder gives the new weights' vectors."""
    tok = BertTokenizerFast.from_pretrained(folder)
    ids = [[tok.cls_token_id, *tok(words(5), add_special_tokens=False)["input_ids"], tok.sep_token_id]]
    table = longbert.Pipeline.from_options(model=str(folder), pooling="cls")(longbert.Batch.from_texts([words(5)]))
    np.testing.assert_allclose(np.array(table.column("features").to_pylist(), np.float32),
                               reference_vectors(BertModel.from_pretrained(folder).eval(), tok, ids), atol=1e-5)


def test_an_unpickled_pipeline_of_a_folder_saved_again_says_to_build_it_again(folder):
    import pickle

    pipe = longbert.Pipeline.from_options(model=str(folder))
    pipe(longbert.Batch.from_texts([words(5)]))   # loaded: the weights' sha256 is the one pickled
    then = pipe.resolution().facts.sha256
    blob = pickle.dumps(pipe)
    _save_again(folder, seed=10)
    now = model_sha256(folder)
    back = pickle.loads(blob)
    for _ in range(2):
        with pytest.raises(ModelError) as err:
            back(longbert.Batch.from_texts([words(5)]))
        assert str(err.value) == (
            f"the model folder {str(folder)!r} was saved again after this pipeline was pickled: its files' sha256 "
            f"was {then[:12]}... then and is {now[:12]}... now, and this pipeline keeps the old one; build the "
            f"pipeline again from the folder (longbert.Pipeline.from_options(model={str(folder)!r}, ...) in "
            "Python, or a new `longbert extract` run), and pickle that one")
    _works_when_built_again(folder)


def test_resume_after_the_model_folder_changed_is_exit_2_naming_the_weights(folder, runner, tmp_path):
    src = write_csv(tmp_path / "in.csv", [{"text": words(4 + i)} for i in range(4)])
    args = ["extract", src, "--model", folder, "-o", f"{tmp_path / 'parts'}/", "--block-rows", "2", "--no-progress"]
    assert invoke(runner, args).exit_code == 0
    _save_again(folder, seed=9)
    result = invoke(runner, [*args, "--resume"])
    assert result.exit_code == 2
    assert "--resume: the model's weights differ from the run that wrote" in result.output
    assert "then," in result.output and "now" in result.output


def test_a_model_unhashed_when_its_options_were_checked_is_hashed_once_loaded(folder, tmp_path):
    """As a hub model is, whose files arrive only with its weights: the run hashes them after the load,
    and the file's metadata names that hash."""
    import dataclasses
    import json

    import pyarrow.parquet as pq

    from pipeline.model.checkpoint import model_sha256

    pipe = longbert.Pipeline.from_options(model=str(folder))
    unhashed = pipe.with_facts(dataclasses.replace(pipe.resolution().facts, sha256=None))
    assert unhashed.resolution().facts.sha256 is None and unhashed["encode"].facts.sha256 is None
    src = write_csv(tmp_path / "in.csv", [{"text": words(6)}])
    unhashed.run(str(src), str(tmp_path / "out.parquet"))
    meta = json.loads(pq.read_schema(tmp_path / "out.parquet").metadata[b"longbert"])
    assert meta["model_sha256"] == model_sha256(folder)


def _config_opens(monkeypatch, folder, action) -> int:
    """How many times ``action()`` opens ``folder``/config.json (builtins.open and io.open, which
    transformers, json loading and hashing all go through)."""
    import builtins
    import io

    target, seen, real = os.path.realpath(folder / "config.json"), [], builtins.open

    def counting(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.path.realpath(os.fspath(file)) == target:
            seen.append(file)
        return real(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    monkeypatch.setattr(io, "open", counting)
    try:
        action()
    finally:
        monkeypatch.undo()
    return len(seen)


def test_one_extract_reads_config_json_at_most_twice_more_than_transformers(runner, tiny_model_dir, tmp_path, monkeypatch):
    from transformers import AutoModel, AutoTokenizer

    floor = _config_opens(monkeypatch, tiny_model_dir, lambda: (AutoTokenizer.from_pretrained(tiny_model_dir),
                                                                AutoModel.from_pretrained(tiny_model_dir)))
    assert floor >= 2                                   # the count sees transformers' own reads
    src = write_csv(tmp_path / "in.csv", [{"text": words(12, i)} for i in range(3)])
    ours = _config_opens(monkeypatch, tiny_model_dir, lambda: invoke(runner, [
        "extract", src, "-o", tmp_path / "o.parquet", "--model", tiny_model_dir, "--no-progress"]))
    assert (tmp_path / "o.parquet").exists()
    assert ours <= floor + 2, (ours, floor)             # our own: the check of the file and its hash
