"""The Markdown tables of bench/compare_torch.py, from the results it collected.

    report(results)     the whole Markdown report (bench/results/compare_torch.<machine>.md)
    training_table, floor_table, mfu_table, memory_table, decoding_tables, batch_size_table
                        one section each

Ratios are minitransformer / torch in throughput (above 1: minitransformer is faster) and in
memory (above 1: it uses more).
"""

from __future__ import annotations

import statistics

IMPLS = ("minitransformer", "torch")
MiB = 2 ** 20


def table(headers: list[str], rows: list[list]) -> str:
    """A Markdown table with aligned columns (readable in a terminal as well)."""
    cells = [[str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def spread(row: dict) -> str:
    return f"{row['median_s']:.3f} ({row['min_s']:.3f}–{row['max_s']:.3f})"


def training_table(training: dict) -> str:
    rows = []
    for name, result in training.items():
        for r in result["rows"]:
            ours, theirs, ratio = r["minitransformer"], r["torch"], r["ratio"]
            rows.append([name, r["length"], r["batch"], spread(ours), spread(theirs),
                         f"{ours['tokens_per_s']:,.0f}", f"{theirs['tokens_per_s']:,.0f}",
                         f"{ratio['median']:.2f} ({ratio['min']:.2f}–{ratio['max']:.2f})"])
    return table(["config", "L", "batch", "minitransformer s, median (min–max)",
                  "torch s, median (min–max)", "minitransformer tok/s", "torch tok/s",
                  "ratio (min–max)"], rows)


def floor_table(training: dict) -> str:
    """Each case's step time against its matmul floor (bench/floor.py), beside the ratio to
    torch; the rows of a run that measured no floor are left out."""
    rows = []
    for name, result in training.items():
        for r in result["rows"]:
            if "floor" not in r:
                continue
            floor, ours, theirs = r["floor"], r["minitransformer"], r["torch"]
            rate = floor["flops"] / floor["seconds"]
            rows.append([name, r["length"], r["batch"], f"{floor['flops'] / 1e9:.1f}",
                         f"{floor['seconds']:.3f}", f"{rate / 1e9:.1f}",
                         f"{ours['median_s']:.3f}", f"{ours['step_over_floor']:.2f}",
                         f"{theirs['median_s']:.3f}", f"{theirs['step_over_floor']:.2f}",
                         f"{r['ratio']['median']:.2f}"])
    return table(["config", "L", "batch", "GFLOP / step", "floor s", "floor GFLOP/s",
                  "minitransformer s", "minitransformer / floor", "torch s", "torch / floor",
                  "ratio to torch"], rows)


def floor_note(training: dict) -> str:
    """What the floor is, for the report (one paragraph)."""
    first = next((r["floor"] for result in training.values() for r in result["rows"]
                  if "floor" in r), None)
    if first is None:
        return ""
    return (
        "The floor is the time of the step's matrix products alone: every product of one "
        "step, forward and backward (the linear layers' y = x Wᵀ, dW = doutᵀ x and dx = "
        "dout W; attention's Q Kᵀ, P V and their four backward products; the tied output "
        "projection), in float32, the operands laid out as the step has them, outputs "
        "preallocated, each product warm and alone, timed in every round right after the "
        f"round's steps (each product's median of {first['repeats']} calls) with NumPy's "
        f"matmul at {first['threads']} threads, "
        "the faster of one BLAS call and one block per thread on single-threaded BLAS; the "
        "floor is the sum over the step's products (bench/floor.py). A NumPy implementation "
        "cannot go below it: everything else (layer norm, softmax, dropout, the loss, Adam, "
        "the graph) adds to it. floor s is the median over rounds, and step / floor the median "
        "over rounds of each round's step time over that round's floor (torch uses its own "
        "BLAS, so it can go below 1); ratio to torch as in the table above.")


def _floor_section(training: dict) -> list[str]:
    note = floor_note(training)
    return ["### The matmul floor\n", note + "\n", floor_table(training) + "\n"] if note else []


def mfu_table(training: dict) -> str:
    rows = []
    for name, result in training.items():
        for r in result["rows"]:
            ours, theirs = r["minitransformer"], r["torch"]
            rows.append([name, r["length"], f"{r['flops_per_step'] / 1e9:.1f}",
                         f"{ours['flops_per_s'] / 1e9:.1f}", f"{theirs['flops_per_s'] / 1e9:.1f}",
                         f"{ours['mfu']:.0%}", f"{theirs['mfu']:.0%}"])
    return table(["config", "L", "GFLOP / step", "minitransformer GFLOP/s", "torch GFLOP/s",
                  "minitransformer MFU", "torch MFU"], rows)


def memory_table(memory: dict) -> str:
    rows = []
    for name, result in memory.items():
        for r in result:
            ours, theirs = r["minitransformer"], r["torch"]
            rows.append([name, r["length"],
                         *(f"{side[k] / MiB:,.0f}" for side in (ours, theirs)
                           for k in ("baseline_bytes", "peak_bytes", "increment_bytes")),
                         f"{r['increment_ratio']:.2f}", f"{r['peak_ratio']:.2f}"])
    sides = [f"{impl} {what}" for impl in IMPLS for what in ("baseline", "peak", "step")]
    return table(["config", "L", *[f"{s} MiB" for s in sides], "step ratio", "peak ratio"],
                 rows)


def _seconds(run: dict) -> str:
    return f"{run['seconds']:.2f} ({min(run['runs_s']):.2f}–{max(run['runs_s']):.2f})"


def decoding_tables(decoding: dict) -> str:
    rows = []
    for c in decoding["cases"]:
        ours, theirs = c["minitransformer"], c["torch"]
        name = "greedy" if c["algorithm"] == "greedy" else f"beam {decoding['beam_size']}"
        rows.append([name, "yes" if c["use_cache"] else "no", _seconds(ours), _seconds(theirs),
                     f"{ours['sentences_per_s']:.1f}",
                     f"{theirs['sentences_per_s']:.1f}",
                     f"{c['ratio']:.2f} ({c['ratio_min']:.2f}–{c['ratio_max']:.2f})",
                     f"{c['identical']:.1%}"])
    speed = table(["decoding", "KV cache", "minitransformer s, median (min–max)",
                   "torch s, median (min–max)", "minitransformer sent/s", "torch sent/s",
                   "ratio (min–max)", "identical outputs"], rows)
    rows = []
    for algorithm, by_impl in decoding["cache_speedup"].items():
        name = "greedy" if algorithm == "greedy" else f"beam {decoding['beam_size']}"
        rows.append([name, *(f"{by_impl[i]['speedup']:.2f}× "
                             f"(same output {by_impl[i]['same_output']:.0%})" for i in IMPLS)])
    f = decoding["forced_length"]
    rows.append([f"greedy, forced to {f['length']} tokens ({f['sentences']} sentences)",
                 *(f"{f[i]['speedup']:.2f}×" for i in IMPLS)])
    cache = table(["cache speed-up (no-cache time / cache time)", *IMPLS], rows)
    return f"{speed}\n\n{cache}"


def batch_size_table(sizes: dict) -> str:
    """Beam search at each batch size: median seconds of each library and their ratio."""
    rows = []
    for size in sizes["sizes"]:
        ours, theirs = (statistics.median(sizes["seconds"][f"{impl} {size}"]) for impl in IMPLS)
        rows.append([size, f"{ours:.2f}", f"{theirs:.2f}",
                     f"{sizes['ratio_at_size'][str(size)]:.2f}"])
    best = sizes["best_size"]
    return (table(["batch size", "minitransformer s", "torch s", "ratio"], rows)
            + f"\n\nEach at its fastest size (minitransformer {best['minitransformer']}, torch "
            f"{best['torch']}): {sizes['ratio_at_best_sizes']:.2f}. The same hypotheses at "
            f"every size and in both: {sizes['same_hypotheses']}.")


def _alternation(decoding: dict) -> str:
    """How the timed runs of the two implementations were interleaved."""
    if decoding.get("alternation") == "batch":
        return ("the two alternating batch by batch (each batch decoded by one straight after "
                "the other, which goes first alternating), a run's time the sum over its "
                "batches")
    return ("alternating run by run (each run decodes every batch with one implementation, "
            "which goes first alternating)")


def report(results: dict) -> str:
    """The Markdown report of a run: every part it measured (a run with --only has fewer)."""
    m = results["machine"]
    parity = "; ".join(f"{name}: float64 {p['float64']['worst']:.1e}, float32 "
                       f"{p['float32']['worst']:.1e}"
                       for name, p in results.get("parity", {}).items())
    parts = [
        "## minitransformer vs PyTorch eager\n",
        f"{m['cpu']}"
        + (f" ({m['cpu_generation']})" if m.get("cpu_generation") else "")
        + f", {m['cores']} cores, {m['threads']} threads for both; NumPy "
        f"{m['numpy']} ({m['numpy_blas']}"
        + (f"; {m['numpy_blas_kernels']}" if "numpy_blas_kernels" in m else "")
        + f"), torch {m['torch']} ({m['torch_blas']}"
        + (f"; {m['torch_cpu_capability']}" if "torch_cpu_capability" in m else "")
        + "); device "
        f"{results['device']}"
        + (f" ({m['gpu']}, CuPy {m['cupy']}, CUDA {m['torch_cuda']})" if "gpu" in m else "")
        + (f"; minitransformer's CPU kernels: {m['minitransformer_kernels']}"
           if "minitransformer_kernels" in m else "")
        + (f"; {results['date']}" if "date" in results else "")
        + (f"; commit {results['commit']}" if "commit" in results else "")
        + f". Vocabulary {results['vocab_size']}. "
        "Ratios are minitransformer / torch in throughput: above 1, minitransformer is faster "
        "(memory: above 1, it uses more).\n",
    ]
    if parity:
        parts.append("Parity first (dropout off, a padded batch; worst relative error of "
                     f"logits, loss and every gradient): {parity}.\n")
    if "training" in results:
        peak = results["matmul_peak"]
        parts += [
            "### Training step\n",
            "Zero grads, forward, label-smoothed loss (ε 0.1), backward, Adam; float32, "
            f"dropout 0.1, source = target length L, {results['tokens']} // L sentences; the "
            "two alternate step by step; ratio is the median of the per-step ratios.\n",
            training_table(results["training"]) + "\n",
            *_floor_section(results["training"]),
            "### Model FLOPs utilisation\n",
            "Matmul FLOPs per step (all linear layers, the tied output projection, Q Kᵀ and "
            "P V; 3 × forward) over the median step time, divided by "
            f"{'NumPy' if results['device'] == 'cpu' else 'CuPy'}'s float32 matmul rate "
            f"measured in the same run: {peak['numpy']['flops_per_s'] / 1e9:.1f} GFLOP/s "
            f"(torch's own: {peak['torch']['flops_per_s'] / 1e9:.1f} GFLOP/s).\n",
            mfu_table(results["training"]) + "\n",
        ]
    if "memory" in results:
        parts += [
            "### Peak memory of a training step\n",
            results["memory_note"] + "\n",
            memory_table(results["memory"]) + "\n",
        ]
    if "decoding" in results:
        d = results["decoding"]
        parts += [
            "### Decoding\n",
            f"{d['inputs']}; batches of {d['batch_size']} sentences, length penalty α "
            f"{d['length_penalty']}, at most {d['max_len']} tokens; the same algorithm on both "
            "sides (bench/torch_model.py ports minitransformer/translation/decode.py: with the "
            "cache, a sentence's beams share one row of cross-attention keys and values; "
            "minitransformer's weights frozen once a run, as `translate` freezes them for its "
            "batches, so the transposed copies its small products read are made once); each "
            f"case runs {d['repeats']} times per side, {_alternation(d)}, and the ratio is "
            "the median of the per-run ratios. Without the cache every step decodes the whole "
            "prefix again (all its positions, through the output projection too, as "
            "`Transformer.decode` does). The forced case decodes the first batch with an EOS "
            "id that no step can produce, so every sentence runs "
            f"{d['forced_length']['length']} steps.\n",
            decoding_tables(d) + "\n",
        ]
    if "decoding_batch_sizes" in results:
        d = results["decoding_batch_sizes"]
        parts += [
            "### Beam search at each batch size\n",
            f"{d['inputs']}; beam {d['beam_size']} with the key/value cache; in each of "
            f"{d['repeats']} rounds every (library, batch size) pair decodes all the sentences "
            "once, the pairs in turn, the order reversed every other round; median seconds, "
            "and the ratio of the medians.\n",
            batch_size_table(d) + "\n",
        ]
    parts += ["### CUDA\n", results["cuda"] if isinstance(results["cuda"], str)
              else f"Measured above, on {results['machine'].get('gpu')}.", ""]
    return "\n".join(parts)
