"""Options that do nothing on this run, or cost far more than expected, are warned about on stderr (tiny BERT)."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import extract_cli, words

from pipeline.options.config import PipelineConfig
from pipeline.options.option_warnings import option_warnings

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
ML = 16  # C = 14


def run(runner, tiny_model_dir, tmp_path, *args):
    """conftest.extract_cli on two texts in in.csv (exit 0): (click's Result, the n_windows column)."""
    result, out = extract_cli(tmp_path, [words(n) for n in (3, 40)], *args, model=tiny_model_dir,
                              src=tmp_path / "in.csv", runner=runner)
    return result, pq.read_table(out).column("n_windows").to_pylist()


def test_options_without_effect_are_warned_and_the_run_goes_on(runner, tiny_model_dir, tmp_path):
    result, n_windows = run(runner, tiny_model_dir, tmp_path, "--max-length", ML, "--strategy", "chunk",
                            "--overlap", 4, "--head-tokens", 4, "--chunk-tokens", 5, "--dtype", "float16",
                            "--device", "cpu")
    assert result.stderr.splitlines()[:4] == [
        "Warning: --overlap 4 has no effect: it applies only to --strategy sliding and late (this run: chunk)",
        "Warning: --head-tokens 4 has no effect: it applies only to --strategy head_tail (this run: chunk)",
        "Warning: --chunk-tokens 5 has no effect: it applies only to --strategy late (this run: chunk)",
        "Warning: --dtype float16 on the CPU: CPUs have no fast float16 matrix product, so the model runs several "
        "times slower than in float32 and less exact; drop --dtype (or use --dtype bfloat16, fast on CPUs that "
        "support it), or run on a GPU"]
    assert n_windows == [1, 3]
    result, _ = run(runner, tiny_model_dir, tmp_path, "--max-length", ML, "--strategy", "sliding",
                    "--tail-tokens", 3, "--overlap", 4)
    assert result.stderr.splitlines()[0] == ("Warning: --tail-tokens 3 has no effect: it applies only to "
                                             "--strategy head_tail (this run: sliding)")


def test_config_file_options_for_another_strategy_stay_silent(runner, tiny_model_dir, tmp_path):
    # configs/sliding.yaml sets overlap 128; --strategy chunk on the command line wins; nothing to warn about
    result, n_windows = run(runner, tiny_model_dir, tmp_path, "--config", ROOT / "configs" / "sliding.yaml",
                            "--strategy", "chunk", "--max-length", ML)
    assert "Warning" not in result.stderr and n_windows == [1, 3]
    # bfloat16 is fast on many CPUs; a step of 62 - 4 = 58 tokens is no cost surprise
    result, _ = run(runner, tiny_model_dir, tmp_path, "--max-length", 64, "--strategy", "sliding", "--overlap", 4,
                    "--dtype", "bfloat16", "--device", "cpu")
    assert "Warning" not in result.stderr


def test_small_sliding_step_warns_with_projected_windows(runner, tiny_model_dir, tmp_path):
    result, n_windows = run(runner, tiny_model_dir, tmp_path, "--max-length", ML, "--strategy", "sliding",
                            "--overlap", 12)
    # step 2 of C = 14: 1 + ceil((1000 - 14) / 2) = 494 and 1 + ceil(9986 / 2) = 4994; chunk ceil(n / 14)
    assert result.stderr.splitlines()[0] == (
        "Warning: --overlap 12 leaves a step of 2 tokens (C = 14): a 1,000-token document makes 494 windows and a "
        "10,000-token one 4,994 (chunk: 72 and 715); lower --overlap for a step of >= 32 tokens unless that cost "
        "is meant")
    assert n_windows == [1, 1 + (40 - 14 + 1) // 2]   # the rule the warning projects with


@pytest.mark.parametrize("overlap, warned", [(478, False), (479, True), (509, True)])
def test_small_step_threshold_with_the_models_window(overlap, warned):
    # --max-length not given: the CLI passes the model's 512 -> C = 510; the step is 510 - overlap
    cfg = PipelineConfig.from_options(strategy="sliding", overlap=overlap)
    lines = option_warnings(cfg, {"overlap"}, cpu_only=True, max_length=512)
    assert bool(lines) == warned
    if overlap == 509:
        assert lines[0].startswith("--overlap 509 leaves a step of 1 token (C = 510): a 1,000-token document "
                                   "makes 491 windows")
