"""The tape drawing (viz/tape.py): one node per Function with its output shape, one edge per
tensor, leaves marked as inputs, parameters or constants; a clear error without Graphviz."""

import re

import numpy as np
import pytest

import minitransformer as mt
from minitransformer import viz
from minitransformer.autograd.engine import graph_nodes
from minitransformer.nn import MultiHeadAttention
from minitransformer.viz import _render, tape


def drawn(graph):
    """(nodes: id -> (label text, attributes), edges: [(from label, to label, edge label)])."""
    nodes, edges = {}, []
    for line in graph.body:
        edge = re.match(r"\s*(\w+) -> (\w+)(?: \[(.*)\])?$", line)
        node = re.match(r"\s*(\w+) \[label=<(.*)> (.*)\]$", line)
        if edge:
            label = re.search(r'label="?([^" ]*)"?', edge.group(3) or "")
            edges.append((edge.group(1), edge.group(2), label.group(1) if label else ""))
        elif node:
            text = re.sub(r"<br/>", " | ", node.group(2))
            nodes[node.group(1)] = (re.sub(r"<[^>]+>", "", text), node.group(3))
    return nodes, [(nodes[a][0], nodes[b][0], label) for a, b, label in edges]


@pytest.fixture
def expression():
    x = mt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = mt.tensor([0.5, -0.3, 0.2], requires_grad=True)
    return x, w, (x * w).tanh().sum()


def test_a_small_expression_is_drawn_node_by_node(expression):
    x, w, y = expression
    nodes, edges = drawn(viz.draw_tape(y, names={"x": x, "w": w}))
    labels = sorted(label for label, _ in nodes.values())
    assert labels == ["Mul | (3,)", "Sum | ()", "Tanh | (3,)", "output | ()",
                      "w | input (3,)", "x | input (3,)"]
    assert sorted(edges) == sorted([
        ("x | input (3,)", "Mul | (3,)", ""), ("w | input (3,)", "Mul | (3,)", ""),
        ("Mul | (3,)", "Tanh | (3,)", ""), ("Tanh | (3,)", "Sum | ()", ""),
        ("Sum | ()", "output | ()", "")])


def test_every_function_on_the_tape_is_one_node(expression):
    *_, y = expression
    z = (y * y + y).sqrt()
    nodes, _ = drawn(viz.draw_tape(z))
    functions = sorted(label.split(" | ")[0] for label, attrs in nodes.values()
                       if tape.FUNCTION in attrs)
    assert functions == sorted(node.name for node in graph_nodes([z.creator]))


def test_multi_head_attention_names_its_parameters_and_marks_the_mask():
    mha = MultiHeadAttention(16, 4)
    x = mt.tensor(np.random.default_rng(0).standard_normal((1, 5, 16)), dtype="float32",
                  requires_grad=True)
    out = mha(x, x, x, np.tril(np.ones((5, 5), bool)))
    nodes, edges = drawn(viz.draw_tape(out, names={**dict(mha.named_parameters()), "x": x}))
    by_label = {label: attrs for label, attrs in nodes.values()}
    for name in ("w_q", "w_k", "w_v", "w_o"):
        assert tape.PARAMETER in by_label[f"{name}.weight | parameter (16, 16)"]
        assert tape.PARAMETER in by_label[f"{name}.bias | parameter (16,)"]
    assert tape.INPUT in by_label["x | input (1, 5, 16)"]
    assert "dashed" in by_label["mask (5, 5) | bool"]
    assert ("mask (5, 5) | bool", "ScaledDotProductAttention | (1, 4, 5, 4)", "") in edges
    # Q, K and V: one product split in three, each to its own reshape into heads
    assert sorted(label for a, b, label in edges if a.startswith("Split")) == ["[0]", "[1]", "[2]"]
    assert "Split | (1, 5, 16) ×3" in by_label
    assert [a for a, b, _ in edges if b.startswith("output")] == ["Linear | (1, 5, 16)"]


def test_a_module_names_its_parameters_and_unnamed_parameters_are_still_parameters():
    mha = MultiHeadAttention(8, 2)
    x = mt.tensor(np.ones((1, 2, 8)), dtype="float32")
    labels = [label for label, _ in drawn(viz.draw_tape(mha(x, x, x), names=mha))[0].values()]
    assert "w_o.weight | parameter (8, 8)" in labels
    assert "x" not in " ".join(labels)  # no gradient wanted: drawn as a constant
    assert "constant (1, 2, 8) | float32" in labels
    unnamed = drawn(viz.draw_tape(mha(x, x, x)))[0].values()
    assert sum(label == "parameter | (8, 8)" for label, _ in unnamed) == 4


def test_gradients_and_values_after_backward_with_the_graph_kept(expression):
    x, w, y = expression
    y.backward(retain_graph=True)
    nodes, _ = drawn(viz.draw_tape(y, names={"x": x, "w": w}, grads=True))
    assert {label for label, _ in nodes.values()} >= {"x | input (3,) | grad (3,)",
                                                       "w | input (3,) | grad (3,)"}
    nodes, _ = drawn(viz.draw_tape(y, names={"x": x}, grads=True, values=True))
    x_label = next(label for label, _ in nodes.values() if label.startswith("x |"))
    dx = ", ".join(f"{v:.4g}" for v in x.grad)
    assert x_label == f"x | input (3,) | data [1, 2, 3] | grad [{dx}]"


def test_a_named_result_labels_its_edge():
    q, k = mt.randn(3, 4, requires_grad=True), mt.randn(5, 4, requires_grad=True)
    scores = q @ k.T
    _, edges = drawn(viz.draw_tape(scores.sum(), names={"scores": scores}))
    assert ("MatMul | (3, 5)", "Sum | ()", "scores") in edges


def test_a_graph_freed_by_backward_is_explained(expression):
    *_, y = expression
    y.backward()
    with pytest.raises(RuntimeError, match=r"freed by backward\(\).*retain_graph=True"):
        viz.draw_tape(y)


def test_the_picture_is_laid_out_by_dot(expression, tmp_path):
    *_, y = expression
    viz.draw_tape(y, path=tmp_path / "tape.svg")
    svg = (tmp_path / "tape.svg").read_text()
    assert "<svg" in svg and ">Tanh</text>" in svg and ">(3,)</text>" in svg
    viz.draw_tape(y, path=tmp_path / "tape.png")
    assert (tmp_path / "tape.png").read_bytes()[:4] == b"\x89PNG"
    viz.draw_tape(y, path=tmp_path / "tape.gv")
    assert "Tanh" in (tmp_path / "tape.gv").read_text()
    with pytest.raises(ValueError, match="ending in .svg, .png, .pdf"):
        viz.draw_tape(y, path=tmp_path / "tape.txt")


def test_without_dot_the_error_names_what_to_install(expression, tmp_path, monkeypatch):
    *_, y = expression
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on it
    graph = viz.draw_tape(y)  # drawing needs no `dot`; laying it out does
    for lay_out in (lambda: viz.draw_tape(y, path=tmp_path / "t.svg"),
                    lambda: graph._repr_mimebundle_()):
        with pytest.raises(viz.GraphvizMissing) as error:
            lay_out()
        message = str(error.value)
        assert "Graphviz's `dot` program" in message
        assert all(fix in message for fix in ("apt-get install graphviz",
                                              "brew install graphviz", "conda install"))
    assert not (tmp_path / "t.svg").exists()


def test_without_the_python_package_the_error_names_it(expression, monkeypatch):
    *_, y = expression
    monkeypatch.setitem(__import__("sys").modules, "graphviz", None)
    _render._drawing_class.cache_clear()
    try:
        with pytest.raises(viz.GraphvizMissing, match="pip install graphviz"):
            viz.draw_tape(y)
    finally:
        _render._drawing_class.cache_clear()
