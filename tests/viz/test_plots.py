"""The plots (viz/plots.py): pictures are written, and misuse gets a clear error."""

import json
import os
import subprocess
import sys

import matplotlib
import numpy as np
import pytest

from minitransformer import viz

matplotlib.use("Agg")


def test_attention_heads_writes_a_png_with_one_panel_per_head(tmp_path):
    weights = np.random.default_rng(0).dirichlet(np.ones(4), size=(3, 5))    # (H, T, S)
    figure = viz.attention_heads(weights, list("abcde"), list("wxyz"), title="t",
                                 path=tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 0
    assert sum(axis.has_data() for axis in figure.axes) == 3


def test_attention_heads_refuses_labels_that_do_not_fit():
    with pytest.raises(ValueError, match=r"do not match 2 query and 4 key labels"):
        viz.attention_heads(np.zeros((2, 3, 4)), ["a", "b"], list("wxyz"))


def test_training_curves_read_a_run_log(tmp_path):
    log = tmp_path / "log.jsonl"
    lines = [{"step": s, "loss": 5.0 / s} for s in range(1, 5)]
    lines.append({"validation": {"step": 4, "valid_loss": 2.0, "valid_bleu": 10.0}})
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    viz.training_curves(log, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_training_curves_read_the_log_as_utf8_whatever_the_locale(tmp_path):
    """A log with a German validation sample, read where the locale's encoding is ASCII."""
    log = tmp_path / "log.jsonl"
    record = {"validation": {"step": 1, "valid_loss": 2.0, "sample": ["Ein Mädchen", "A girl"]}}
    log.write_text(json.dumps({"step": 1, "loss": 3.0}) + "\n"
                   + json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0", "MPLBACKEND": "Agg"}
    script = ("import sys; from minitransformer import viz; "
              "viz.training_curves(sys.argv[1], sys.argv[2])")
    done = subprocess.run([sys.executable, "-c", script, str(log), str(tmp_path / "c.png")],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c.png").stat().st_size > 0
