"""Pictures of the model and of what it computes.

    plots    attention heatmaps, the positional encoding, the learning-rate schedule,
             training curves, gradient-check errors (matplotlib)
    tape     the autograd graph behind a tensor (Graphviz)
    model    the paper's Figure 1 drawn from a model, with the shapes of a batch (matplotlib)
    heads    the split and merge of attention heads, read from the tape (matplotlib)
    shapes   the shapes of a batch through the stacks, to scale (matplotlib)
    trace    one forward pass recorded module by module, which model and shapes draw from

Every function saves a picture when given a path and returns the figure (or graph), so a
notebook shows it. Matplotlib and Graphviz are imported when a picture is drawn: importing
``viz`` costs nothing.
"""

from ._render import GraphvizMissing
from .heads import draw_heads
from .model import draw_model
from .plots import attention_heads, gradcheck_errors, positional_encoding, schedule, training_curves
from .shapes import draw_stack_shapes
from .tape import draw_tape

__all__ = [
    "GraphvizMissing", "attention_heads", "draw_heads", "draw_model", "draw_stack_shapes",
    "draw_tape", "gradcheck_errors", "positional_encoding", "schedule", "training_curves",
]
