"""The declared dependency floors hold here, are not below the releases that have the APIs we call, and
those APIs behave as the pipeline needs (pyarrow, transformers, scikit-learn, click, matplotlib)."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

# The first release with what the pipeline calls; a floor below it installs a combination that crashes.
NEEDED = {
    "pyarrow": "15",            # FixedSizeListArray.from_arrays(mask=), Parquet float16 (--out-dtype float16)
    "transformers": "4.56",     # AutoModel.from_pretrained(dtype=)
    "tokenizers": "0.22",       # required by transformers 4.56
    "torch": "2.2",             # required by transformers 4.56
    "safetensors": "0.4.3",     # required by transformers 4.56
    "scikit-learn": "1.6",      # __sklearn_tags__ with InputTags (LongBertVectorizer)
    "matplotlib": "3.5",        # Axes.bar_label, set_xticks(ticks, labels)
    "obstore": "0.12",          # the release tested: put(mode="create"), S3Store(config=, retry_config=)
    "charset-normalizer": "3.0",  # from_bytes(cp_isolation=), CharsetMatch.could_be_from_charset / chaos / coherence
}


def requirements() -> list[Requirement]:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in project["dependencies"] + extras["plot"] + extras["test"]]


def floor(req: Requirement) -> Version | None:
    lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(lows) if lows else None


@pytest.mark.parametrize("req", requirements(), ids=str)
def test_installed_version_satisfies_the_declared_range(req):
    installed = importlib.metadata.version(req.name)
    assert req.specifier.contains(installed, prereleases=True), f"{req.name} {installed} is outside {req}"


def test_declared_floors_are_not_below_the_apis_we_use():
    declared = {}
    for req in requirements():
        low = floor(req)
        if low is not None:
            declared[req.name] = max(low, declared.get(req.name, low))
    for name, needed in NEEDED.items():
        assert name in declared, f"{name} has no floor in pyproject.toml"
        assert declared[name] >= Version(needed), f"{name}>={declared[name]} but the pipeline needs {needed}"


def test_pyarrow_fixed_size_list_with_mask_and_float16_parquet(tmp_path):
    values = pa.array(np.arange(6, dtype=np.float16))
    arr = pa.FixedSizeListArray.from_arrays(values, list_size=3, mask=pa.array([False, True]))
    assert arr.to_pylist() == [[0.0, 1.0, 2.0], None]
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 2], pa.int32()), pa.array([1, 2], pa.int32()),
                                     mask=pa.array([False, True]))
    assert lists.to_pylist() == [[1, 2], None]
    pq.write_table(pa.table({"features": arr}), tmp_path / "half.parquet")
    back = pq.read_table(tmp_path / "half.parquet").column("features")
    assert back.type == pa.list_(pa.float16(), 3) and back.to_pylist() == [[0.0, 1.0, 2.0], None]
    assert back.is_valid().to_numpy(zero_copy_only=False).tolist() == [True, False]


def test_transformers_from_pretrained_takes_dtype(tiny_model_dir):
    from transformers import AutoModel

    model, info = AutoModel.from_pretrained(tiny_model_dir, dtype=torch.bfloat16, attn_implementation="sdpa",
                                            use_safetensors=True, output_loading_info=True)
    assert next(model.parameters()).dtype == torch.bfloat16 and "missing_keys" in info


def test_sklearn_reads_the_vectorizers_tags():
    from sklearn.utils import get_tags

    from pipeline.classify.vectorizer import LongBertVectorizer

    tags = get_tags(LongBertVectorizer())
    assert (tags.requires_fit, tags.input_tags.string, tags.input_tags.one_d_array, tags.input_tags.two_d_array) \
        == (False, True, True, False)


def test_click_runner_keeps_stderr_apart():
    import click
    from click.testing import CliRunner

    @click.command()
    def hello():
        click.echo("out")
        click.echo("err", err=True)

    result = CliRunner().invoke(hello)
    assert (result.stdout, result.stderr) == ("out\n", "err\n")


def test_matplotlib_bar_label():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    bars = ax.bar([0, 1], [0.5, 0.25])
    ax.bar_label(bars, labels=["a", "b"], label_type="center")
    ax.set_xticks([0, 1], ["x", "y"])
    assert [t.get_text() for t in ax.texts] == ["a", "b"]
    plt.close(fig)
