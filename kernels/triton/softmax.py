"""Row softmax in Triton, for protocols/triton-softmax and protocols/softmax-mixed (Python arms:
docs/python-arms.md).

Every kernel reads row `r` of `x` at `x + r * stride` and writes `y` alike; columns at or past
`limit` are neither read nor written (`limit` is the row length, one less under the callable
control `skip_last_col`, which must then fail the fidelity gate). Each wrapper is the arm's
callable: qualify passes the buffers it names as torch tensors over its own allocations, the case's
parameters by name, and runs it with its stream as torch's current one, where Triton launches.

- `softmax_three_pass`: a loop over the row in BLOCK-wide chunks for the maximum, a second for the
  sum of exponentials, a third to write: the row is read three times.
- `softmax_online`: the maximum and the sum in one loop (the running sum rescaled whenever the
  maximum grows), then the write loop: the row is read twice.
- `softmax_row_block`: the whole row in registers (BLOCK the row length rounded up to a power of
  two), read once; the candidate of the mixed protocol against kernels/softmax's NVRTC kernel.

The write is the same expression in all three (exp(x - max) / sum), so the arms differ only by the
order the sum was taken in: a few ulps.
"""

import triton
import triton.language as tl

# a global a @triton.jit function reads must be a constexpr (Triton 3.6 refuses a plain float)
NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def _three_pass(x_ptr, y_ptr, stride, limit, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    running = tl.full([BLOCK], NEG_INF, tl.float32)
    for start in range(0, limit, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        running = tl.maximum(running, tl.load(x_row + cols, mask=cols < limit, other=NEG_INF))
    row_max = tl.max(running, axis=0)
    partial = tl.zeros([BLOCK], tl.float32)
    for start in range(0, limit, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_row + cols, mask=cols < limit, other=NEG_INF)
        partial += tl.exp(v - row_max)
    total = tl.sum(partial, axis=0)
    for start in range(0, limit, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_row + cols, mask=cols < limit, other=NEG_INF)
        tl.store(y_row + cols, tl.exp(v - row_max) / total, mask=cols < limit)


@triton.jit
def _online(x_ptr, y_ptr, stride, limit, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    lane_max = tl.full([BLOCK], NEG_INF, tl.float32)
    lane_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, limit, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_row + cols, mask=cols < limit, other=NEG_INF)
        grown = tl.maximum(lane_max, v)
        # a lane that has seen only masked columns keeps max -inf: its terms are 0, never NaN
        keep = tl.where(grown == NEG_INF, 0.0, tl.exp(lane_max - grown))
        add = tl.where(v == NEG_INF, 0.0, tl.exp(v - grown))
        lane_sum = lane_sum * keep + add
        lane_max = grown
    row_max = tl.max(lane_max, axis=0)
    scale = tl.where(lane_max == NEG_INF, 0.0, tl.exp(lane_max - row_max))
    total = tl.sum(lane_sum * scale, axis=0)
    for start in range(0, limit, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_row + cols, mask=cols < limit, other=NEG_INF)
        tl.store(y_row + cols, tl.exp(v - row_max) / total, mask=cols < limit)


@triton.jit
def _row_block(x_ptr, y_ptr, stride, limit, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + cols, mask=cols < limit, other=NEG_INF)
    row_max = tl.max(v, axis=0)
    e = tl.exp(v - row_max)
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < limit)


def _limit(COLS, control):
    return COLS - 1 if control == "skip_last_col" else COLS


def softmax_three_pass(x, y, ROWS, COLS, BLOCK, num_warps, stream, control=None):
    _three_pass[(ROWS,)](x, y, COLS, _limit(COLS, control), BLOCK=BLOCK, num_warps=num_warps)


def softmax_online(x, y, ROWS, COLS, BLOCK, num_warps, stream, control=None):
    _online[(ROWS,)](x, y, COLS, _limit(COLS, control), BLOCK=BLOCK, num_warps=num_warps)


def softmax_row_block(x, y, ROWS, COLS, num_warps, stream, control=None):
    block = triton.next_power_of_2(COLS)
    _row_block[(ROWS,)](x, y, COLS, _limit(COLS, control), BLOCK=block, num_warps=num_warps)
