"""What a new user hit with probe and stats: --plot refused up front (an unwritable format), the path
written printed, and --label-col named when its column is missing."""
from __future__ import annotations

import pytest

from tests.conftest import invoke, words, write_csv

pytest.importorskip("matplotlib")

LABELLED = [{"text": words(6 + i, i % 3), "label": "ab"[i % 2]} for i in range(12)]


def _formats() -> str:
    from matplotlib.figure import Figure

    return ", ".join("." + f for f in sorted(Figure().canvas.get_supported_filetypes()))


@pytest.mark.parametrize("command", ["probe", "stats"])
def test_plot_with_a_format_matplotlib_cannot_write_is_refused_before_the_run(runner, tiny_model_dir, tmp_path,
                                                                              command):
    src = write_csv(tmp_path / "labelled.csv", LABELLED)
    plot = tmp_path / "out" / f"{command}.csv"
    extra = ["--label-col", "label"] if command == "probe" else ["--windows-per-second", 10]
    result = invoke(runner, [command, src, "--model", tiny_model_dir, *extra, "--plot", plot])
    assert result.exit_code == 2, result.output
    assert result.output == (f"Error: --plot {str(plot)!r}: matplotlib cannot write '.csv' files; use one of "
                             f"{_formats()} (e.g. --plot {plot.with_suffix('.png')})\n")
    assert not plot.parent.exists()


def test_stats_plot_without_a_suffix_prints_the_png_it_writes(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "corpus.csv", LABELLED)
    plot = tmp_path / "out" / "stats"
    result = invoke(runner, ["stats", src, "--model", tiny_model_dir, "--windows-per-second", 10, "--plot", plot])
    assert result.exit_code == 0, result.output
    written = tmp_path / "out" / "stats.png"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plot.exists()
    assert result.output.splitlines()[-1] == f"plot -> {written}"


def test_probe_plot_without_a_suffix_prints_the_png_it_writes(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "labelled.csv", LABELLED)
    plot = tmp_path / "out" / "probe"
    result = invoke(runner, ["probe", src, "--label-col", "label", "--model", tiny_model_dir, "--folds", 2,
                             "--no-progress", "--plot", plot])
    assert result.exit_code == 0, result.output
    written = tmp_path / "out" / "probe.png"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.output.splitlines()[-1] == f"chart -> {written}"


def test_probe_missing_label_column_names_label_col(runner, tiny_model_dir, tmp_path):
    src = write_csv(tmp_path / "labelled.csv", LABELLED)
    result = invoke(runner, ["probe", src, "--label-col", "lable", "--model", tiny_model_dir])
    assert result.exit_code == 2, result.output
    assert result.output == (f"Error: {src}: column 'lable' not found; columns are ['text', 'label']; "
                             "pass --label-col with one of them\n")
