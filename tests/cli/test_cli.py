"""The `minitransformer` command: gradcheck's table, JSON, filter, seed and exit status."""

import json
import subprocess
import sys

import pytest
from conftest import CUDA

from minitransformer import cli
from minitransformer.verify import function_cases, module_cases
from minitransformer.verify.function_cases import Case, inputs, normal


def test_full_suite_passes_below_1e_6_from_the_installed_command(tmp_path):
    result = subprocess.run([sys.executable, "-m", "minitransformer", "gradcheck", "--json"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == len(function_cases.CASES) + len(module_cases.MODULE_CASES)
    assert {row["name"] for row in rows} >= {"Transformer+loss", "MultiHeadAttention"}
    for row in rows:
        assert {"name", "max_abs_error", "max_rel_error", "passed"} <= row.keys()
        assert row["passed"] and row["max_rel_error"] < 1e-6, row


def test_table_has_one_row_per_case_and_a_summary(capsys):
    assert cli.main(["gradcheck", "--filter", "matmul"]) == 0
    out = capsys.readouterr().out.splitlines()
    n_matmul = sum(c.name == "matmul" for c in function_cases.CASES)
    rows = [line for line in out if line.startswith("matmul")]
    assert len(rows) == n_matmul and all(" pass " in line for line in rows)
    notes = {c.note for c in function_cases.CASES if c.name == "matmul" and c.note}
    assert {line.split("ms  ", 1)[1] for line in rows if "ms  " in line} == notes
    assert out[0].split()[:2] == ["name", "inputs"]
    assert out[-1].startswith(f"{n_matmul} passed, 0 failed")


def test_seed_changes_the_inputs_and_the_errors(capsys):
    cli.main(["gradcheck", "--filter", "tanh", "--json", "--seed", "1"])
    first = json.loads(capsys.readouterr().out)
    cli.main(["gradcheck", "--filter", "tanh", "--json", "--seed", "2"])
    second = json.loads(capsys.readouterr().out)
    assert first[0]["max_abs_error"] != second[0]["max_abs_error"]


def test_a_failing_row_fails_the_command(monkeypatch, capsys):
    broken = Case("broken", lambda a: a.detach() * a, inputs(normal(2, 2)))  # misses a term
    monkeypatch.setattr(function_cases, "CASES", [broken])
    monkeypatch.setattr(module_cases, "MODULE_CASES", [])
    assert cli.main(["gradcheck"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "0 passed, 1 failed" in out


@pytest.mark.parametrize("kernels", ["numpy", "compiled"])
def test_kernels_chooses_the_cpu_path_and_the_summary_names_it(capsys, kernels):
    if kernels == "compiled":
        pytest.importorskip("numba")
    assert cli.main(["gradcheck", "--filter", "layer_norm", "--kernels", kernels]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"2 passed, 0 failed (float64, device cpu, {kernels} kernels, seed 0)"


def test_compiled_kernels_without_numba_is_a_clear_error(monkeypatch, capsys):
    from minitransformer.functional import _compiled
    monkeypatch.setattr(_compiled, "available", lambda: False)
    assert cli.main(["gradcheck", "--filter", "layer_norm", "--kernels", "compiled"]) == 2
    assert "pip install 'minitransformer[fast]'" in capsys.readouterr().err


def test_a_filter_that_matches_nothing_says_so(capsys):
    assert cli.main(["gradcheck", "--filter", "no-such-op"]) == 2
    assert "no case name contains 'no-such-op'" in capsys.readouterr().err


@pytest.mark.skipif(CUDA, reason="this machine has CuPy and a GPU")
def test_asking_for_cuda_without_it_is_a_clear_error(capsys):
    assert cli.main(["gradcheck", "--device", "cuda", "--filter", "add"]) == 2
    assert 'pip install -e ".[gpu]"' in capsys.readouterr().err


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "gradcheck" in capsys.readouterr().out


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`minitransformer info | head -1`: the pipe closes before the output is written."""
    import os
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([sys.executable, "-m", "minitransformer", "info", "--config",
                                 "tiny", "--vocab-size", "100"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr
