# ruff: noqa: E501  (a mutant's line is quoted as it stands in the source)
"""Do the tests catch a wrong backward? Break each one on purpose and see.

    python tests/mutation_sweep.py              # every mutant: a few minutes on 2 cores
    python tests/mutation_sweep.py --list       # their names
    python tests/mutation_sweep.py --only drop-rowsum dv-no-transpose

Each mutant is one small, plausible mistake in a hand-written backward (or in the CPU block
machinery, or in Adam): a flipped sign, a dropped term, a missing transpose, a mask taken from
the wrong rows. One at a time, on a copy of the package and its tests in a temporary folder,
the mutant replaces its line and the tests that cover it run (tests/functional, the gradcheck
suite, the modules' gradients, autograd and the float32 step; tests/test_optim.py for Adam).
A mutant the tests let pass is a wrong gradient nobody would notice: the sweep prints it as
SURVIVED and exits with status 1. It is not part of ``pytest`` (a survivor runs every test
that covers its file), but ``tests/test_mutation_sweep.py`` checks that every mutant still
finds its line, so the list follows the code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = "minitransformer/functional/attention.py"
LAYER_NORM = "minitransformer/functional/normalization.py"
RESIDUAL = "minitransformer/functional/residual.py"
ACTIVATION = "minitransformer/functional/activation.py"
LOSS = "minitransformer/functional/loss.py"
LINALG = "minitransformer/functional/linalg.py"
FEED_FORWARD = "minitransformer/functional/feed_forward.py"
EMBEDDING = "minitransformer/functional/embedding.py"
DROPOUT = "minitransformer/functional/dropout.py"
BASIC = "minitransformer/functional/basic.py"
REDUCTION = "minitransformer/functional/reduction.py"
SHAPE = "minitransformer/functional/shape.py"
INDEXING = "minitransformer/functional/indexing.py"
BLOCKS = "minitransformer/functional/_blocks.py"
OPTIM = "minitransformer/optim.py"
COMPILED = "minitransformer/functional/_compiled.py"
ENGINE = "minitransformer/autograd/engine.py"
PACKED = "minitransformer/functional/_packed.py"
COMPILED_TESTS = ("tests/functional/test_compiled.py",)

GRADIENT_TESTS = ["tests/functional", "tests/verify/test_checker.py",
                  "tests/nn/test_module_gradients.py", "tests/autograd",
                  "tests/test_step_dtypes.py"]
OPTIMIZER_TESTS = ["tests/test_optim.py", "tests/test_step_dtypes.py"]


class Mutant(NamedTuple):
    name: str
    path: str                       # relative to the repository
    old: str                        # found exactly once in the file
    new: str                        # what replaces it
    only_tests: tuple[str, ...] = ()  # instead of the tests that cover the file

    @property
    def tests(self) -> list[str]:
        if self.only_tests:
            return list(self.only_tests)
        return OPTIMIZER_TESTS if self.path == OPTIM else GRADIENT_TESTS


MUTANTS = [
    Mutant('dv-no-transpose', ATTENTION,
           'mm(xp.swapaxes(p, -1, -2), g, out=dv[rows])',
           'mm(p, g, out=dv[rows])'),
    Mutant('drop-rowsum', ATTENTION,
           '                dS -= delta    ',
           '                pass           '),
    Mutant('rowsum-without-P', ATTENTION,
           'delta = sum_last(g * out[rows])[..., None]',
           'delta = sum_last(dS)[..., None]'),
    Mutant('mask-instead-of-P', ATTENTION,
           '                dS *= p\n',
           '                dS *= (p > 0)\n'),
    Mutant('dq-scale-twice', ATTENTION,
           'dq[rows] *= self.scale',
           'dq[rows] *= self.scale * self.scale'),
    Mutant('dk-uses-k', ATTENTION,
           'mm(xp.swapaxes(dS, -1, -2), q[rows], out=dk[rows])',
           'mm(xp.swapaxes(dS, -1, -2), k[rows], out=dk[rows])'),
    Mutant('dk-sign', ATTENTION,
           'dk[rows] *= self.scale',
           'dk[rows] *= -self.scale'),
    Mutant('masked-get-dP', ATTENTION,
           '                dS *= p\n',
           '                dS *= xp.where(p == 0, 1.0, p)\n'),
    Mutant('want_dqk-only-q', ATTENTION,
           'want_dqk = self.needs_input_grad[0] or self.needs_input_grad[1]',
           'want_dqk = self.needs_input_grad[0]'),
    Mutant('dv-only-with-dqk', ATTENTION,
           '            if dv is not None:\n',
           '            if dv is not None and want_dqk:\n'),
    Mutant('block-dv-wrong-rows', ATTENTION,
           'mm(xp.swapaxes(p, -1, -2), g, out=dv[rows])',
           'mm(xp.swapaxes(p, -1, -2), g, out=dv[rows if rows is Ellipsis or rows.start == 0 else slice(0, rows.stop - rows.start)])'),
    Mutant('dv-times-2', ATTENTION,
           '        _for_leading_blocks(gradients, P, xp)\n        return (dq, dk, dv, None)',
           '        _for_leading_blocks(gradients, P, xp)\n        dv = dv * 2 if dv is not None else None\n        return (dq, dk, dv, None)'),
    Mutant('drop-mean_g', LAYER_NORM,
           '    g -= mean_g\n',
           '    pass\n'),
    Mutant('drop-xhat-term', LAYER_NORM,
           '    g -= xp.multiply(x_hat, mean_gx, out=d_xh)',
           '    pass'),
    Mutant('sign-mean_g', LAYER_NORM,
           '    g -= mean_g\n',
           '    g += mean_g\n'),
    Mutant('drop-rstd', LAYER_NORM,
           '    g *= rstd\n    return sums',
           '    return sums'),
    Mutant('mean_gx-without-xhat', LAYER_NORM,
           'mean_gx = (d_xh @ gain)[:, None] / C',
           'mean_gx = (d @ gain)[:, None] / C'),
    Mutant('dgain-is-dbias', LAYER_NORM,
           'sums = (sum_rows(d_xh), sum_rows(d))',
           'sums = (sum_rows(d), sum_rows(d))'),
    Mutant('mean-over-C-1', LAYER_NORM,
           'mean_g = (d @ gain)[:, None] / C',
           'mean_g = (d @ gain)[:, None] / (C - 1)'),
    Mutant('block-drop-last-partial', LAYER_NORM,
           '    for start in sorted(partial):',
           '    for start in sorted(partial)[:-1]:'),
    Mutant('block-rstd-wrong-rows', LAYER_NORM,
           'gain, rstd2[rows], dx_rows)',
           'gain, rstd2[:len(d2[rows])], dx_rows)'),
    Mutant('mean_gx-without-gain', LAYER_NORM,
           'mean_gx = (d_xh @ gain)[:, None] / C',
           'mean_gx = d_xh.sum(axis=-1)[:, None] / C'),
    Mutant('residual-dh-unscaled', RESIDUAL,
           '                dh_rows *= scale\n',
           '                pass\n'),
    Mutant('residual-dh-without-mask', RESIDUAL,
           'dh_rows = xp.multiply(dr[rows], keep[rows], out=dh[rows])',
           'dh_rows = xp.multiply(dr[rows], 1, out=dh[rows])'),
    Mutant('residual-xhat-mean-of-first-rows', RESIDUAL,
           'x_hat = x_hat_rows(r[rows], mean[rows], shift[rows], rstd[rows],',
           'x_hat = x_hat_rows(r[rows], mean[:rows.stop - rows.start], shift[rows], rstd[rows],'),
    Mutant('softmax-drop-rowsum', ACTIVATION,
           'return y * (dout - (dout * y).sum(axis=self.axis, keepdims=True))',
           'return y * dout'),
    Mutant('softmax-axis-last', ACTIVATION,
           'return y * (dout - (dout * y).sum(axis=self.axis, keepdims=True))',
           'return y * (dout - (dout * y).sum(axis=-1, keepdims=True))'),
    Mutant('logsoftmax-y-not-expy', ACTIVATION,
           'return dout - xp.exp(y) * dout.sum(axis=self.axis, keepdims=True)',
           'return dout - y * dout.sum(axis=self.axis, keepdims=True)'),
    Mutant('logsoftmax-sign', ACTIVATION,
           'return dout - xp.exp(y) * dout.sum(axis=self.axis, keepdims=True)',
           'return dout + xp.exp(y) * dout.sum(axis=self.axis, keepdims=True)'),
    Mutant('tanh-1-y', ACTIVATION,
           'return dout * (1 - y * y)',
           'return dout * (1 - y)'),
    Mutant('relu-ge', ACTIVATION,
           'xp.multiply(dout, y > 0, out=da)',
           'xp.multiply(dout, y >= 0, out=da)'),
    Mutant('drop-smoothing', LOSS,
           '                dz_rows -= smooth[rows]\n',
           '                pass\n'),
    Mutant('target-no-1-eps', LOSS,
           'target_scale = row_scale[:, 0] * (1.0 - self.eps)',
           'target_scale = row_scale[:, 0]'),
    Mutant('no-ignore-mask', LOSS,
           'real = t != self.ignore_index',
           'real = t == t'),
    Mutant('drop-zero-ignored-rows', LOSS,
           '                dz_rows[~real[rows]] = 0',
           '                pass'),
    Mutant('divide-by-all-rows', LOSS,
           'row_scale = (real / n_real).astype(dz.dtype)[:, None]',
           'row_scale = (real / real.size).astype(dz.dtype)[:, None]'),
    Mutant('smooth-V-1', LOSS,
           'smooth = row_scale * (self.eps / V)',
           'smooth = row_scale * (self.eps / (V - 1))'),
    Mutant('ignore-dout', LOSS,
           'xp.multiply(dz[rows], dout, out=scaled[rows])',
           'xp.multiply(dz[rows], 1.0, out=scaled[rows])'),
    Mutant('e-not-p', LOSS,
           'dz_rows *= row_scale[rows] / sum_e[rows, None]',
           'dz_rows *= row_scale[rows]'),
    Mutant('block-target-wrong-rows', LOSS,
           't_safe[rows, 0]] -= target_scale[rows]',
           't_safe[:dz_rows.shape[0], 0]] -= target_scale[rows]'),
    Mutant('target-sign', LOSS,
           't_safe[rows, 0]] -= target_scale[rows]',
           't_safe[rows, 0]] += target_scale[rows]'),
    Mutant('dW-sign', LINALG,
           'dW = _products.matmul(dout2.T, x2)',
           'dW = -_products.matmul(dout2.T, x2)'),
    Mutant('db-wrong-axis', LINALG,
           'db = sum_rows(dout2)',
           'db = dout2.sum(axis=-1)'),
    Mutant('linear-relu-ge', LINALG,
           'y2[rows] > 0, out=masked[rows]',
           'y2[rows] >= 0, out=masked[rows]'),
    Mutant('relu-db-unmasked', LINALG,
           'partial[rows.start] = sum_rows(dz)',
           'partial[rows.start] = sum_rows(dout2[rows])'),
    Mutant('block-relu-wrong-rows', LINALG,
           'xp.multiply(dout2[rows], y2[rows] > 0, out=masked[rows])',
           'xp.multiply(dout2[rows], y2[:rows.stop - rows.start] > 0, out=masked[rows])'),
    Mutant('matmul-db-first-batch', LINALG,
           'db = sum_to(db, b2.shape).reshape(b.shape)',
           'db = (db if db.ndim == b2.ndim else db.reshape((-1,) + db.shape[-2:])[0]).reshape(b.shape)'),
    Mutant('dx-times-2', LINALG,
           'dx = _products.matmul(dout2, weight).reshape(self.x_shape)',
           'dx = 2 * _products.matmul(dout2, weight).reshape(self.x_shape)'),
    Mutant('feed-forward-mask-ge', FEED_FORWARD,
           'block = xp.multiply(dz[rows], h2[rows] > 0, out=dz[rows])',
           'block = xp.multiply(dz[rows], h2[rows] >= 0, out=dz[rows])'),
    Mutant('feed-forward-short-group-one-row-more', FEED_FORWARD,
           'group_sums[first + whole // G] = block[whole:].sum(axis=0)',
           'group_sums[first + whole // G] = block[whole - 1:].sum(axis=0)'),
    Mutant('feed-forward-blocks-not-aligned', FEED_FORWARD,
           '_products.matmul(d2, w2, out=dz, after=mask, align=GROUP_ROWS)',
           '_products.matmul(d2, w2, out=dz, after=mask)'),
    Mutant('assign-not-accumulate', EMBEDDING,
           'xp.add.at(dW, ids.reshape(-1), dout.reshape(-1, C))',
           'dW[ids.reshape(-1)] = dout.reshape(-1, C)'),
    Mutant('keep-padding-row', EMBEDDING,
           '            dW[self.padding_idx] = 0',
           '            pass'),
    Mutant('padding-row-0-hardcoded', EMBEDDING,
           '            dW[self.padding_idx] = 0',
           '            dW[0] = 0'),
    Mutant('ignore-mask', DROPOUT,
           '            xp.multiply(dout, keep, out=dx)\n',
           '            dx[...] = dout\n'),
    Mutant('no-scale', DROPOUT,
           '            dx *= self.scale\n        for_element_blocks(apply, (dout, keep, dx), xp)',
           '            pass\n        for_element_blocks(apply, (dout, keep, dx), xp)'),
    Mutant('scale-1-over-1-p', DROPOUT,
           '            dx *= self.scale\n        for_element_blocks(apply, (dout, keep, dx), xp)',
           '            dx *= 1 / (1 - self.p)\n        for_element_blocks(apply, (dout, keep, dx), xp)'),
    Mutant('sub-db-sign', BASIC,
           'sum_to(-dout, self.b_shape)',
           'sum_to(dout, self.b_shape)'),
    Mutant('div-db-sign', BASIC,
           'sum_to(-da_full * y, self.b_shape)',
           'sum_to(da_full * y, self.b_shape)'),
    Mutant('pow-zero-base-p>0', BASIC,
           'zero_base = (a == 0) & (p >= 0)',
           'zero_base = (a == 0) & (p > 0)'),
    Mutant('pow-no-constant-guard', BASIC,
           'power = a ** xp.where(constant, 1, p - 1)',
           'power = a ** (p - 1)'),
    Mutant('sqrt-no-2', BASIC,
           'return dout / (2 * self.saved)',
           'return dout / self.saved'),
    Mutant('astype-no-cast', BASIC,
           'return dout.astype(self.a_dtype, copy=False)',
           'return dout'),
    Mutant('mean-no-count', REDUCTION,
           'expanded = _expand(dout, self.axes, self.keepdims) / self.count',
           'expanded = _expand(dout, self.axes, self.keepdims)'),
    Mutant('max-perm-not-inverse', REDUCTION,
           '        for position, ax in enumerate(self.kept + list(self.axes)):\n            inverse[ax] = position',
           '        for position, ax in enumerate(self.kept + list(self.axes)):\n            inverse[position] = ax'),
    Mutant('transpose-perm-not-inverse', SHAPE,
           '        return backend.get_array_module(dout).transpose(dout, inverse)',
           '        return backend.get_array_module(dout).transpose(dout, self.perm)'),
    Mutant('getitem-assign', INDEXING,
           '            xp.add.at(da, self.index, dout)',
           '            da[self.index] = dout'),
    Mutant('where-db-swapped', INDEXING,
           'db = sum_to(xp.where(condition, zero, dout), self.b_shape)',
           'db = sum_to(xp.where(condition, dout, zero), self.b_shape)'),
    Mutant('threaded-drop-last-block', BLOCKS,
           '        shared_out(kernel, blocks)',
           '        shared_out(kernel, blocks[:-1])'),
    Mutant('sequential-drop-last-block', BLOCKS,
           '        for rows in blocks:\n            kernel(rows)',
           '        for rows in blocks[:-1]:\n            kernel(rows)'),
    Mutant('gradient-sum-subtracts', BLOCKS,
           'lambda a, b, out: xp.add(a, b, out=out)',
           'lambda a, b, out: xp.subtract(a, b, out=out)'),
    Mutant('split-backward-blocks-first-part-only', INDEXING,
           'zip(douts, starts[:-1], starts[1:], strict=True)',
           'zip(douts[:1], starts[:1], starts[1:2], strict=True)'),
    Mutant('noncontiguous-copies', BLOCKS,
           '    else:\n        kernel(*arrays)',
           '    else:\n        kernel(*(xp.ascontiguousarray(a) for a in arrays))'),
    Mutant('no-m-bias-correction', OPTIM,
           'return self.lr * correction2 / (1 - beta1 ** step_count), self.eps * correction2',
           'return self.lr * correction2 / 1, self.eps * correction2'),
    Mutant('no-v-bias-correction', OPTIM,
           'return self.lr * correction2 / (1 - beta1 ** step_count), self.eps * correction2',
           'return self.lr / (1 - beta1 ** step_count), self.eps * correction2'),
    Mutant('eps-uncorrected', OPTIM,
           'return self.lr * correction2 / (1 - beta1 ** step_count), self.eps * correction2',
           'return self.lr * correction2 / (1 - beta1 ** step_count), self.eps'),
    Mutant('v-uses-abs-g', OPTIM,
           '    xp.multiply(g, g, out=scratch)\n',
           '    xp.abs(g, out=scratch)\n'),
    Mutant('m-decays-with-beta2', OPTIM,
           '    m *= beta1 ',
           '    m *= beta2 '),
    Mutant('step-count-off-by-one', OPTIM,
           'self.update(*self.step_scalars(self.step_count))',
           'self.update(*self.step_scalars(self.step_count + 1))'),
    Mutant('theta-plus', OPTIM,
           '    theta -= scratch\n',
           '    theta += scratch\n'),
    # the compiled kernels (Numba), caught by their comparison with NumPy's path and gradcheck
    Mutant('compiled-residual-keep-inverted', COMPILED,
           'kept = levels[i, j] >= threshold',
           'kept = levels[i, j] < threshold', COMPILED_TESTS),
    Mutant('compiled-residual-dh-unscaled', COMPILED,
           'dh[i, j] = dr[i, j] * (one if keep[i, j] else zero) * scale',
           'dh[i, j] = dr[i, j] * (one if keep[i, j] else zero)', COMPILED_TESTS),
    Mutant('compiled-residual-xhat-without-rstd', COMPILED,
           'x_hat[j] = (r[i, j] - centre) * rstd[i]',
           'x_hat[j] = r[i, j] - centre', COMPILED_TESTS),
    Mutant('compiled-layer-norm-drop-mean-g', COMPILED,
           'dx[j] = rstd * (d[j] * gain[j] - mean_g - x_hat[j] * mean_gx)',
           'dx[j] = rstd * (d[j] * gain[j] - x_hat[j] * mean_gx)', COMPILED_TESTS),
    Mutant('compiled-layer-norm-dgain-without-xhat', COMPILED,
           'dgain[j] += d[j] * x_hat[j]',
           'dgain[j] += d[j]', COMPILED_TESTS),
    Mutant('compiled-layer-norm-xhat-unscaled', COMPILED,
           'x_hat[i, j] = (x[i, j] - centre) * rstd[i]',
           'x_hat[i, j] = x[i, j] - centre', COMPILED_TESTS),
    Mutant('compiled-relu-gradient-unmasked', COMPILED,
           'g = dout[i, j] * (one if y[i, j] > zero else zero)',
           'g = dout[i, j]', COMPILED_TESTS),
    Mutant('compiled-relu-groups-unmasked', COMPILED,
           'd = row[j] * (one if kept[j] > zero else zero)',
           'd = row[j]', COMPILED_TESTS),
    Mutant('compiled-scatter-overwrites', COMPILED,
           'target[j] += source[j]',
           'target[j] = source[j]', COMPILED_TESTS),
    Mutant('compiled-adam-v-uses-abs-g', COMPILED,
           'vk = b2 * v[k] + c2 * (gk * gk)',
           'vk = b2 * v[k] + c2 * abs(gk)', COMPILED_TESTS),
    Mutant('compiled-loss-shift-by-zero', COMPILED,
           'shifted[i, j] = z[i, j] - m',
           'shifted[i, j] = z[i, j]', COMPILED_TESTS),
    Mutant('compiled-loss-no-smoothing', COMPILED,
           'e[i, j] = e[i, j] * factor - smooth',
           'e[i, j] = e[i, j] * factor', COMPILED_TESTS),
    Mutant('compiled-loss-target-not-lowered', COMPILED,
           'e[i, targets[i]] -= e.dtype.type(scale * (1.0 - eps))',
           'e[i, targets[i]] -= e.dtype.type(scale)', COMPILED_TESTS),
    Mutant('compiled-loss-ignored-rows-kept', COMPILED,
           '            if scale == zero:\n',
           '            if scale == zero and False:\n', COMPILED_TESTS),
    Mutant('compiled-splitmix-no-first-mix', COMPILED,
           'z = (z ^ (z >> u64(30))) * mix_1',
           'z = z * mix_1', COMPILED_TESTS),
    Mutant('compiled-gather-append-row-ignored', COMPILED,
           'out[r, h, s, d] = kept[row, h, s, d]',
           'out[r, h, s, d] = kept[r, h, s, d]', COMPILED_TESTS),
    # the engine: a gradient taken or summed in place only where nothing else holds it
    Mutant('engine-sum-into-a-held-gradient', ENGINE,
           'elif _sole_owner(slots[index], held_by=1):',
           'elif _sole_owner(slots[index], held_by=2):'),
    Mutant('engine-leaf-takes-a-held-gradient', ENGINE,
           'leaf.grad = grad if owned else grad.copy()',
           'leaf.grad = grad'),
    # dQ, dK, dV (or cross-attention's dK, dV) written side by side as the projection's gradient
    Mutant('packed-views-at-one-offset', PACKED,
           'made = [numpy.ndarray(a.shape, a.dtype, buffer, _address(a) - start, a.strides)',
           'made = [numpy.ndarray(a.shape, a.dtype, buffer, 0, a.strides)'),
]


def applies(mutant: Mutant, root: Path = ROOT) -> bool:
    """Whether the mutant's line is in its file exactly once."""
    return (root / mutant.path).read_text().count(mutant.old) == 1


def copy_project(folder: Path) -> None:
    """The package, its tests and their configuration, copied into ``folder``."""
    for part in ("minitransformer", "tests"):
        shutil.copytree(ROOT / part, folder / part,
                        ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    shutil.copy(ROOT / "setup.cfg", folder / "setup.cfg")


def run(mutant: Mutant, copy: Path) -> tuple[str, str]:
    """(KILLED, SURVIVED, STALE or ERROR, the first failing test or pytest's last line).

    KILLED means some test failed (pytest's status 1); ERROR, that pytest could not run the
    tests at all (a missing file, a -k that selects nothing), which catches nothing."""
    path = copy / mutant.path
    source = path.read_text()
    if source.count(mutant.old) != 1:
        return "STALE", f"its line is in {mutant.path} {source.count(mutant.old)} times, not once"
    path.write_text(source.replace(mutant.old, mutant.new))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
             "--hypothesis-seed=0", *mutant.tests],
            cwd=copy, env={**os.environ, "PYTHONPATH": str(copy)},
            capture_output=True, text=True)
    finally:
        path.write_text(source)
    lines = (done.stdout + done.stderr).strip().splitlines()
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    evidence = (failed[:1] or lines[-1:] or ["(no output)"])[0]
    status = {0: "SURVIVED", 1: "KILLED"}.get(done.returncode, "ERROR")
    return status, evidence


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    parser.add_argument("--list", action="store_true", help="print the mutants' names")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"no mutant named {', '.join(sorted(unknown))}; see --list")
    if args.list:
        for mutant in MUTANTS:
            print(f"{mutant.name:<34} {mutant.path}")
        return 0
    outcomes = []
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder)
        copy_project(copy)
        for i, mutant in enumerate(chosen, start=1):
            start = time.perf_counter()
            status, evidence = run(mutant, copy)
            outcomes.append(status)
            print(f"{i:>3}/{len(chosen)} {status:<8} {mutant.name:<34} "
                  f"{time.perf_counter() - start:4.0f} s  {evidence[:100]}", flush=True)
    missed = len(chosen) - outcomes.count("KILLED")
    print(f"{outcomes.count('KILLED')} of {len(chosen)} mutants caught"
          + (f"; {missed} not: a wrong backward the tests let through, a stale line, or "
             "tests pytest could not run" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
