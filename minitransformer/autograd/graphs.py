"""Replaying a step as one graph of device work: CUDA graphs, captured through CuPy.

A GPU driven from Python pays the host's time for every kernel launch, some microseconds of
Python, CuPy and driver work, and a training step of the `small` model launches thousands of
small kernels: the GPU waits for the host. CUDA can record what a stream is given (stream
capture) into a graph, and launch the whole graph again with one call. A replay runs the same
kernels, with the same arguments, on the same device addresses. So:

* what changes from one call to the next must reach the graph through memory: the inputs are
  copied into the *static* buffers the capture read, the outputs are read from the buffers
  it wrote (and the next replay overwrites them), and a scalar that varies (a learning rate)
  lives in a 0-d device array, never in a Python float, which the capture would bake in;
* nothing may read the device from the host while capturing (``.item()``, ``float(x)``,
  ``bool(x)``, a copy to the host): no value exists yet, and CUDA refuses. Checks of values
  (token ids in range) step aside when ``is_capturing()``; the caller makes them before
  each replay;
* random numbers drawn with ``draw_outside_graph`` (dropout's) are drawn again before every
  replay, from the generator as it is then, into the static buffer the graph reads: each
  replay gets new masks, the very masks the eager step would have drawn. That buffer lies
  outside the graph's memory pool: memory the capture allocates may be shared by arrays that
  live at different times in the graph (a block freed early in the step serves a later
  array), and a buffer filled before the launch in such memory would be overwritten by the
  graph's own earlier kernels before the dropout read it;
* every graph allocates from a memory pool of its own, so the addresses it replays on stay
  its own after the capture (a graph dropped from its cache frees them).

    capture(fn, inputs, device)    record ``fn(*static inputs)``: a Graph, or an error
    Graph.replay(inputs)           copy inputs in, draw the random numbers, launch: outputs
    GraphCache(device)             graphs by key (shapes, dtype, mode): eager the first time
                                   a key comes, captured the second, replayed from then on
    draw_outside_graph(make, ...)  a random array, drawn outside the graph
    is_capturing()                 whether a capture is recording on this thread's device
    register_capture(device, f)    how a device captures (CUDA; the tests' strict stand-in)
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from .. import backend


class GraphsUnavailable(ValueError):
    """Graphs were asked for on a device that cannot capture them (the CPU has no kernel
    launches to save)."""


class _Draw:
    """A random array a captured region reads: ``make()`` fills ``buffer`` before a replay."""

    __slots__ = ("make", "buffer")

    def __init__(self, make: Callable[[], Any], buffer: Any):
        self.make, self.buffer = make, buffer


_tape: list[_Draw] | None = None  # the draws of the capture that is recording, if any
_recorder: Any = None             # and its recorder


def is_capturing() -> bool:
    """True while ``capture`` records: reading a device value on the host would fail."""
    return _tape is not None


def draw_outside_graph(make: Callable[[], Any], shape: tuple[int, ...], dtype: Any,
                       xp: Any) -> Any:
    """``make()``: a random array of ``shape`` and ``dtype``. While a capture records, a static
    buffer instead, which every replay fills with ``make()`` first (``make`` must ask for the
    generator when called, e.g. ``backend.rng(device)``: a seed set between replays counts)."""
    if _tape is None:
        return make()
    buffer = _recorder.static_empty(shape, dtype)  # outside the graph's pool; no kernel
    _tape.append(_Draw(make, buffer))
    return buffer


class _CudaCapture:
    """Stream capture through CuPy, for one graph: a memory pool of its own, and the stream it
    records and launches on, ordered after the caller's stream and before its next work by
    events (no host synchronisation)."""

    _streams: dict[int, Any] = {}  # one capture stream per GPU

    def __init__(self) -> None:
        self.cupy = cupy = backend.get_backend("cuda").xp
        device = cupy.cuda.Device().id
        if device not in self._streams:
            self._streams[device] = cupy.cuda.Stream(non_blocking=True)
        self.stream = self._streams[device]
        self.pool = cupy.cuda.MemoryPool()
        self.allocator = cupy.cuda.get_allocator()  # the caller's: static_empty's memory
        self.graph: Any = None

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        caller = self.cupy.cuda.get_current_stream()
        self.stream.wait_event(caller.record())
        with self.stream:
            yield
        caller.wait_event(self.stream.record())

    def record(self, fn: Callable[[], Any]) -> Any:
        with self._on_stream():
            for set_up in _SET_UPS:  # what must not be created while capturing, made now
                set_up()
            # CuPy captures in relaxed mode: the private pool may grow (cudaMalloc) meanwhile
            with self.cupy.cuda.using_allocator(self.pool.malloc):
                self.stream.begin_capture()
                try:
                    result = fn()
                except BaseException:
                    with contextlib.suppress(Exception):  # the capture is invalid: end it
                        self.stream.end_capture()
                    raise
                self.graph = self.stream.end_capture()
        return result

    def static_empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """An array from the caller's allocator (CuPy's default pool), not the graph's: no
        array of the graph shares its memory, so what is written there before a launch stays
        until the graph reads it."""
        with self.cupy.cuda.using_allocator(self.allocator):
            return self.cupy.empty(shape, dtype=dtype)

    def launch(self, before: Callable[[], None]) -> None:
        with self._on_stream():
            before()
            self.graph.launch(self.stream)


_CAPTURES: dict[str, Callable[[], Any]] = {"cuda": _CudaCapture}
_SET_UPS: list[Callable[[], None]] = []


def set_up_before_cuda_captures(set_up: Callable[[], None]) -> None:
    """Call ``set_up()`` on the capture stream just before every CUDA capture begins: for what
    must not be created or allocated while capturing (the products' cuBLAS handle and its
    workspace, ``functional/_cublas.py``)."""
    _SET_UPS.append(set_up)


def register_capture(device: str, factory: Callable[[], Any]) -> None:
    """Let ``device`` capture graphs: ``factory()`` makes an object that records one graph,
    ``record(fn) -> fn()`` (refusing what a capture cannot hold), gives arrays outside the
    graph's memory, ``static_empty(shape, dtype)``, and replays it, ``launch(before)``
    (``before()`` first). The test suite's strict device registers one."""
    _CAPTURES[device] = factory


def supports_graphs(device: str) -> bool:
    return device in _CAPTURES


class Graph:
    """One captured region: its static inputs, its outputs and the random draws it reads."""

    def __init__(self, recorder: Any, inputs: tuple[Any, ...], outputs: Any, draws: list[_Draw]):
        self.recorder, self.inputs, self.outputs, self.draws = recorder, inputs, outputs, draws

    def replay(self, inputs: tuple[Any, ...]) -> Any:
        """Copy ``inputs`` into the static inputs, draw the random numbers, launch; the
        outputs are the capture's arrays, which the next replay of this graph overwrites."""
        for static, given in zip(self.inputs, inputs, strict=True):
            if given is not static:
                static[...] = given

        def draw() -> None:
            for d in self.draws:
                d.buffer[...] = d.make()
        self.recorder.launch(draw)
        return self.outputs


def capture(fn: Callable[..., Any], inputs: tuple[Any, ...], device: str) -> Graph:
    """Record ``fn(*static)`` on ``device``, ``static`` being copies of ``inputs`` made for the
    graph. Nothing runs yet: replay the Graph for results. Raises what the capture raised
    (a host synchronisation inside ``fn``, say); then nothing was computed, and calling ``fn``
    eagerly is safe."""
    global _tape, _recorder
    if device not in _CAPTURES:
        raise GraphsUnavailable(f"device {device!r} cannot capture graphs (only "
                                f"{', '.join(sorted(_CAPTURES))} can); run eagerly there.")
    if _tape is not None:
        raise RuntimeError("capture: a capture is already recording; captures do not nest.")
    xp = backend.get_backend(device).xp
    static = tuple(xp.array(x, copy=True) for x in inputs)  # outside the capture
    recorder = _CAPTURES[device]()
    draws: list[_Draw] = []
    _tape, _recorder = draws, recorder
    try:
        outputs = recorder.record(lambda: fn(*static))
    finally:
        _tape, _recorder = None, None
    return Graph(recorder, static, outputs, draws)


class GraphCache:
    """Graphs of one kind of step, by key (the shapes and dtypes of its inputs, the mode).

    The first call with a key runs eagerly (a warm-up: kernels compile, libraries allocate
    their workspaces, the shapes show they repeat); the second captures and replays; later
    ones replay. A key whose capture failed runs eagerly from then on, and ``fallbacks``
    says why; after ``max_failures`` failed captures no key is captured any more. At most
    ``max_graphs`` graphs are kept: with ``evict`` (decoding, whose shapes move on as the
    outputs grow) the least recently used is dropped first, with its memory; without it
    (training, whose batch shapes come back every epoch, where dropping the least recently
    used would drop each graph just before its shape returned) the first ``max_graphs`` keys
    keep theirs and the others run eagerly (``counts["not kept"]``).
    """

    def __init__(self, device: str, max_graphs: int = 8, max_failures: int = 3,
                 evict: bool = True):
        if not supports_graphs(device):
            raise GraphsUnavailable(f"CUDA graphs need a GPU (device 'cuda'), not {device!r}; "
                                    "leave them out (--cuda-graphs) on the CPU.")
        if max_graphs < 1:
            raise ValueError(f"max_graphs must be at least 1, got {max_graphs}.")
        self.device, self.max_graphs, self.max_failures = device, max_graphs, max_failures
        self.evict = evict
        self.graphs: OrderedDict[Any, Graph] = OrderedDict()
        self.seen: dict[Any, int] = {}
        self.fallbacks: dict[Any, str] = {}  # key -> why it runs eagerly
        self.counts = {"eager": 0, "captured": 0, "replayed": 0, "dropped": 0, "not kept": 0}

    def __call__(self, key: Any, fn: Callable[..., Any], inputs: tuple[Any, ...]) -> Any:
        """``fn(*inputs)``, eagerly or by a graph of ``key``: the outputs, which a graph's
        next replay overwrites (copy what must outlive it)."""
        graph = self.graphs.get(key)
        if graph is not None:
            self.graphs.move_to_end(key)
            self.counts["replayed"] += 1
            return graph.replay(inputs)
        if (key in self.fallbacks or self.seen.get(key, 0) < 1
                or len(self.fallbacks) >= self.max_failures):
            self.seen[key] = self.seen.get(key, 0) + 1
            self.counts["eager"] += 1
            return fn(*inputs)
        if not self.evict and len(self.graphs) >= self.max_graphs:  # full: this key eagerly
            self.counts["eager"] += 1
            self.counts["not kept"] += 1
            return fn(*inputs)
        try:
            graph = capture(fn, inputs, self.device)
        except Exception as exc:  # nothing ran: the eager call below is the step
            self.fallbacks[key] = f"{type(exc).__name__}: {exc}"
            self.counts["eager"] += 1
            return fn(*inputs)
        self.counts["captured"] += 1
        self.graphs[key] = graph
        while len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)
            self.counts["dropped"] += 1
        return graph.replay(inputs)

    def drop(self, key: Any) -> None:
        """Drop ``key``'s graph, if it has one (the arrays it updates are about to be freed);
        the key starts afresh."""
        if self.graphs.pop(key, None) is not None:
            self.counts["dropped"] += 1
        self.seen.pop(key, None)

    def clear(self) -> None:
        """Drop every graph (the arrays they update were replaced); keys start afresh."""
        self.counts["dropped"] += len(self.graphs)
        self.graphs.clear()
        self.seen.clear()

    def summary(self) -> dict[str, Any]:
        """Counts of eager calls, captures, replays and dropped graphs, and each fallback."""
        return {**self.counts, "kept": len(self.graphs),
                "fallbacks": {str(key): why for key, why in self.fallbacks.items()}}
