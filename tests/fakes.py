"""Fake kernels for the engine tests: Python versions of tests/plans.py's axpy."""

from __future__ import annotations

import numpy as np


def _arrays(memory, args):
    (_, x), (_, y), (_, out), (_, a), (_, n) = args
    view = lambda ptr: memory.view(ptr, 4 * n).view(np.float32)  # noqa: E731
    return view(x), view(y), view(out), np.float32(a), n


def axpy(memory, args, kernel):
    x, y, out, a, n = _arrays(memory, args)
    out[:] = a * x + y
    if "QUALIFY_CONTROL_OFF_BY_ONE" in dict(kernel.compiled.spec.defines):
        out[-1] = np.nextafter(out[-1], np.float32(np.inf))


def axpy_one_wrong(memory, args, kernel):
    axpy(memory, args, kernel)
    if kernel.label == "candidate":
        _, _, out, _, n = _arrays(memory, args)
        out[n // 2] += 1.0


def axpy_skips_last(memory, args, kernel):
    x, y, out, a, n = _arrays(memory, args)
    if kernel.label == "candidate":
        out[:-1] = a * x[:-1] + y[:-1]
    else:
        out[:] = a * x + y


class Nondeterministic:
    def __init__(self):
        self.calls = 0

    def __call__(self, memory, args, kernel):
        axpy(memory, args, kernel)
        if kernel.label == "candidate":
            self.calls += 1
            _, _, out, _, _ = _arrays(memory, args)
            out[0] += self.calls


class InterruptAfter:
    def __init__(self, launches: int):
        self.left = launches

    def __call__(self, memory, args, kernel):
        self.left -= 1
        if self.left < 0:
            raise KeyboardInterrupt
        axpy(memory, args, kernel)
