"""Core ML lowerings: recurrent ops (LSTM, GRU, RNN), unrolled over a static sequence."""
from __future__ import annotations

from typing import Callable

import numpy as np

from onnxbridge.backends.coreml.lower import Ctx, MAX_UNROLL, narrow, np_dtype, op


def _ifoc(w: np.ndarray) -> np.ndarray:
    """ONNX gate blocks [i, o, f, c] along axis 0 -> MIL's [i, f, o, c]."""
    i, o, f, c = np.split(w, 4, axis=0)
    return np.concatenate([i, f, o, c], axis=0).astype(np.float32)


# ONNX RNN activations: which of activation_alpha / activation_beta each takes (with ONNX's defaults)
RNN_PARAMS = {"Relu": (None, None), "Tanh": (None, None), "Sigmoid": (None, None), "Softsign": (None, None),
              "Softplus": (None, None), "Affine": (1.0, 0.0), "LeakyRelu": (0.01, None),
              "ThresholdedRelu": (1.0, None), "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None)}


def _rnn_activations(ctx: Ctx, defaults: list[str], directions: int) -> list[Callable]:
    """The node's ``activations`` (default ``defaults`` per direction) as functions on MIL vars; alphas and
    betas are consumed in order by the activations that take them (as onnxruntime)."""
    names = ctx.attr("activations") or defaults * directions
    alphas, betas = list(ctx.attr("activation_alpha") or []), list(ctx.attr("activation_beta") or [])
    if len(names) != len(defaults) * directions:
        ctx.refuse(f"activations lists {len(names)} functions; {len(defaults) * directions} expected")
    fns = []
    for name in names:
        if name not in RNN_PARAMS:
            ctx.refuse(f"activation {name} is not an ONNX RNN activation")
        alpha, beta = RNN_PARAMS[name]
        alpha = alphas.pop(0) if alpha is not None and alphas else alpha
        beta = betas.pop(0) if beta is not None and betas else beta
        fns.append(_activation(ctx.mb, name, alpha, beta))
    return fns


def _activation(mb, name: str, alpha, beta) -> Callable:
    """One ONNX RNN activation from MIL elementwise ops."""
    f32 = np.float32
    return {"Relu": lambda v: mb.relu(x=v), "Tanh": lambda v: mb.tanh(x=v), "Sigmoid": lambda v: mb.sigmoid(x=v),
            "Softsign": lambda v: mb.real_div(x=v, y=mb.add(x=mb.abs(x=v), y=f32(1))),
            "Softplus": lambda v: mb.softplus(x=v),
            "Affine": lambda v: mb.add(x=mb.mul(x=v, y=f32(alpha)), y=f32(beta)),
            "LeakyRelu": lambda v: mb.leaky_relu(x=v, alpha=float(alpha)),
            "ThresholdedRelu": lambda v: mb.select(cond=mb.greater(x=v, y=f32(alpha)), a=v, b=f32(0)),
            "ScaledTanh": lambda v: mb.mul(x=mb.tanh(x=mb.mul(x=v, y=f32(beta))), y=f32(alpha)),
            "HardSigmoid": lambda v: mb.sigmoid_hard(x=v, alpha=float(alpha), beta=float(beta)),
            "Elu": lambda v: mb.elu(x=v, alpha=float(alpha))}[name]


def _rnn_input(ctx: Ctx):
    """X as [s, b, I] (transposed from [b, s, I] when ``layout=1``) and the per-step masks of ``sequence_lens``
    ([b, 1] bools, step < length; None when absent or every length is the sequence's)."""
    x = ctx.get(0)
    layout = int(ctx.attr("layout", 0))
    if layout:
        x = ctx.mb.transpose(x=x, perm=[1, 0, 2])
    lens, steps = ctx.get(4), x.shape[0]
    if lens is None or isinstance(lens, np.ndarray) and isinstance(steps, (int, np.integer)) and \
            np.all(lens == int(steps)):
        return x, None
    if not isinstance(steps, (int, np.integer)):
        ctx.refuse("sequence_lens with a flexible sequence length are not lowered")
    _check_unroll(ctx, int(steps))
    if isinstance(lens, np.ndarray):
        return x, [narrow(t < lens).reshape(-1, 1) for t in range(int(steps))]
    lens = ctx.mb.expand_dims(x=lens if np_dtype(lens) == np.int32 else ctx.mb.cast(x=lens, dtype="int32"), axes=[1])
    return x, [ctx.mb.less(x=np.int32(t), y=lens) for t in range(int(steps))]


def _rnn_state(ctx: Ctx, i: int, d: int, x, hidden: int):
    """Initial state input ``i`` of direction ``d`` as [b, H] (``layout=1``: stored [b, D, H])."""
    if ctx.attr("layout", 0) and ctx.get(i) is not None:
        state = ctx.get(i)
        state = state[:, d] if isinstance(state, np.ndarray) else ctx.mb.squeeze(x=ctx.mb.slice_by_index(
            x=state, begin=np.array([0, d, 0], np.int32), end=np.array([0, d + 1, 0], np.int32),
            begin_mask=[True, False, True], end_mask=[True, False, True]), axes=[1])
        return narrow(state) if isinstance(state, np.ndarray) else state
    return _state(ctx, i, d, x, hidden)


def _clipped(ctx: Ctx, v):
    """A gate's pre-activation bounded to [-clip, clip] when the node has ``clip``."""
    clip = ctx.attr("clip")
    if clip is None:
        return v
    return ctx.mb.minimum(x=ctx.mb.maximum(x=v, y=np.float32(-clip)), y=np.float32(clip))


def _step(ctx: Ctx, seq, t: int):
    """Row ``t`` of a [s, b, n] var as [b, n]."""
    return ctx.mb.squeeze(x=ctx.mb.slice_by_index(x=seq, begin=np.array([t, 0, 0], np.int32),
                                                  end=np.array([t + 1, 0, 0], np.int32),
                                                  end_mask=[False, True, True]), axes=[0])


def _check_unroll(ctx: Ctx, steps: int) -> None:
    if steps > MAX_UNROLL:
        ctx.refuse(f"a sequence of {steps} steps is too long to unroll (at most {MAX_UNROLL})")


def _masked(ctx: Ctx, mask, new, old):
    """``new`` where the step is within the batch row's sequence length, else ``old``."""
    return new if mask is None else ctx.mb.select(cond=mask, a=new, b=old)


@op("LSTM")
def lstm(ctx: Ctx):
    """Any direction, ``layout`` 0/1. MIL's own lstm (one per direction, the backward one over the reversed
    sequence) for the default activations; clip, other activations, peepholes, ``input_forget`` and
    ``sequence_lens`` shorter than the sequence: unrolled over the (static) sequence with ONNX's equations."""
    w, r, b, peep = ctx.get(1), ctx.get(2), ctx.get(3), ctx.get(7)
    backwards = _directions(ctx)
    hidden = _hidden(ctx, w, 4)
    x, masks = _rnn_input(ctx)
    acts = _rnn_activations(ctx, ["Sigmoid", "Tanh", "Tanh"], len(backwards))
    constant = all(v is None or isinstance(v, np.ndarray) for v in (w, r, b, peep))
    plain = constant and masks is None and ctx.attr("clip") is None and not ctx.attr("input_forget", 0) and \
        (peep is None or not np.any(peep)) and ctx.attr("activations") in (None, ["Sigmoid", "Tanh", "Tanh"]
                                                                              * len(backwards))
    if not plain and not isinstance(x.shape[0], (int, np.integer)):
        ctx.refuse("clip, peepholes, input_forget, sequence_lens, non-default activations or run-time weights "
                   "need a static sequence length (the LSTM is unrolled)")
    mb, ys, hs, cs = ctx.mb, [], [], []
    for d, backward in enumerate(backwards):
        h0, c0 = _rnn_state(ctx, 5, d, x, hidden), _rnn_state(ctx, 6, d, x, hidden)
        bias = np.zeros(8 * hidden, np.float32) if b is None else _pick(ctx, b, d)
        if plain:
            y, h, c = mb.lstm(x=mb.reverse(x=x, axes=[0]) if backward else x, initial_h=h0, initial_c=c0,
                              weight_ih=_ifoc(w[d]), weight_hh=_ifoc(r[d]), bias=_ifoc(bias[:4 * hidden])
                              + _ifoc(bias[4 * hidden:]), direction="forward", output_sequence=True,
                              recurrent_activation="sigmoid", cell_activation="tanh", activation="tanh")
            y = mb.reverse(x=y, axes=[0]) if backward else y
        else:
            p = np.zeros(3 * hidden, np.float32) if peep is None else _pick(ctx, peep, d)
            y, h, c = _lstm_direction(ctx, x, _pick(ctx, w, d), _pick(ctx, r, d), bias, p, h0, c0,
                                      acts[3 * d:3 * d + 3], masks, backward)
        ys.append(y)
        hs.append(h)
        cs.append(c)
    return _rnn_outputs(ctx, ys, hs, cs)


def _lstm_direction(ctx: Ctx, x, w, r, b, p, h, c, acts: list, masks, backward: bool) -> tuple:
    """One direction unrolled (ONNX gates [i, o, f, c], peepholes [i, o, f]): outputs [s, b, H] in time order
    (zeros past a row's sequence length) and the final h and c [b, H]."""
    mb, hidden, steps = ctx.mb, int(w.shape[0]) // 4, int(x.shape[0])
    _check_unroll(ctx, steps)
    f, g, act_h = acts
    xw = _linear(ctx, x, w, _sum(ctx, _part(ctx, b, 0, 4 * hidden), _part(ctx, b, 4 * hidden, 8 * hidden)))
    pi, po, pf = (_part(ctx, p, k * hidden, (k + 1) * hidden) for k in range(3))
    outputs = [None] * steps
    for t in (reversed(range(steps)) if backward else range(steps)):
        gi, go, gf, gc = mb.split(x=mb.add(x=_step(ctx, xw, t), y=_linear(ctx, h, r)), num_splits=4, axis=-1)
        i = f(_clipped(ctx, mb.add(x=gi, y=mb.mul(x=c, y=pi))))
        forget = mb.sub(x=np.float32(1), y=i) if ctx.attr("input_forget", 0) else \
            f(_clipped(ctx, mb.add(x=gf, y=mb.mul(x=c, y=pf))))
        c_new = mb.add(x=mb.mul(x=forget, y=c), y=mb.mul(x=i, y=g(_clipped(ctx, gc))))
        o = f(_clipped(ctx, mb.add(x=go, y=mb.mul(x=c_new, y=po))))
        h_new = mb.mul(x=o, y=act_h(c_new))
        mask = None if masks is None else masks[t]
        outputs[t] = h_new if mask is None else mb.select(cond=mask, a=h_new, b=np.float32(0))
        h, c = _masked(ctx, mask, h_new, h), _masked(ctx, mask, c_new, c)
    return mb.stack(values=outputs, axis=0), h, c


def _hidden(ctx: Ctx, w, gates: int) -> int:
    """The hidden size from W [D, gates * H, I] (a constant or a var of static shape)."""
    rows = w.shape[1]
    if not isinstance(rows, (int, np.integer)):
        ctx.refuse(f"W of flexible shape {list(w.shape)} leaves the hidden size unknown")
    return int(rows) // gates


def _pick(ctx: Ctx, v, d: int):
    """Direction ``d`` of a per-direction parameter [D, ...]: a narrowed constant, or a gathered var."""
    return narrow(v[d]) if isinstance(v, np.ndarray) else ctx.mb.gather(x=v, indices=np.int32(d), axis=0)


def _part(ctx: Ctx, v, start: int, stop: int):
    """Rows ``start:stop`` (along axis 0) of a constant or a var."""
    if isinstance(v, np.ndarray):
        return v[start:stop]
    end_mask = [False] + [True] * (v.rank - 1)
    return ctx.mb.slice_by_index(x=v, begin=np.array([start] + [0] * (v.rank - 1), np.int32),
                                 end=np.array([stop] + [0] * (v.rank - 1), np.int32), end_mask=end_mask)


def _sum(ctx: Ctx, a, b):
    """a + b, folded when both are constants."""
    return a + b if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) else ctx.mb.add(x=a, y=b)


def _linear(ctx: Ctx, x, w, b=None):
    """x @ w.T + b: MIL's linear for a constant weight and bias, else a matmul (and an add)."""
    if isinstance(w, np.ndarray) and (b is None or isinstance(b, np.ndarray)):
        return ctx.mb.linear(x=x, weight=w, bias=b)
    y = ctx.mb.matmul(x=x, y=w, transpose_y=True)
    return y if b is None else ctx.mb.add(x=y, y=b)


def _directions(ctx: Ctx) -> list[bool]:
    """Whether each ONNX direction (index 0, 1) runs over the reversed sequence."""
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        ctx.refuse(f"direction={direction} is not an RNN direction")
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]


def _state(ctx: Ctx, i: int, d: int, x, hidden: int):
    """Initial state input ``i`` ([D, b, H]) of direction ``d`` as [b, H]; zeros when absent."""
    state = ctx.get(i)
    if state is None:
        return _zero_state(ctx, x, hidden)
    if isinstance(state, np.ndarray):
        return narrow(state[d])
    return ctx.mb.squeeze(x=ctx.mb.slice_by_index(x=state, begin=np.array([d, 0, 0], np.int32),
                                                  end=np.array([d + 1, 0, 0], np.int32),
                                                  end_mask=[False, True, True]), axes=[0])


def _rnn_outputs(ctx: Ctx, ys: list, *finals: list) -> tuple:
    """ONNX's Y [s, D, b, H] and final states [D, b, H] from per-direction [s, b, H] and [b, H] values."""
    outs = list(ctx.node.output) + [""] * (1 + len(finals) - len(ctx.node.output))
    layout = int(ctx.attr("layout", 0))  # 1: Y [b, s, D, H], final states [b, D, H]

    def stack(values, axis, i, perm=None):
        if not outs[i]:
            return None
        named = {} if perm else {"name": ctx.name(i)}
        y = ctx.mb.expand_dims(x=values[0], axes=[axis], **named) if len(values) == 1 else \
            ctx.mb.stack(values=values, axis=axis, **named)
        return ctx.mb.transpose(x=y, perm=perm, name=ctx.name(i)) if perm else y
    return (stack(ys, 1, 0, [2, 0, 1, 3] if layout else None),
            *(stack(f, 1 if layout else 0, i + 1) for i, f in enumerate(finals)))[:len(ctx.node.output)]


def _zero_state(ctx: Ctx, x, hidden: int):
    """Zeros [batch, hidden] for a recurrent op's x [seq, batch, input], also when batch is flexible."""
    batch = x.shape[1]
    if isinstance(batch, (int, np.integer)):
        return np.zeros((int(batch), hidden), np.float32)
    rows = ctx.mb.slice_by_index(x=ctx.mb.shape(x=x), begin=np.array([1], np.int32), end=np.array([2], np.int32))
    return ctx.mb.fill(shape=ctx.mb.concat(values=[rows, np.array([hidden], np.int32)], axis=0), value=0.0)


@op("GRU")
def gru(ctx: Ctx):
    """GRU unrolled over the (static) sequence, any direction, ``layout`` 0/1, ``clip``, any activations,
    ``sequence_lens``: ONNX gates [z, r, h]; ``linear_before_reset`` 0 applies the reset gate before the
    recurrent product, 1 after it (MIL's own gru matches neither when Rbh != 0)."""
    w, r, b = (narrow(v) if isinstance(v, np.ndarray) else v for v in (ctx.get(1), ctx.get(2), ctx.get(3)))
    backwards = _directions(ctx)
    hidden = _hidden(ctx, w, 3)
    x, masks = _rnn_input(ctx)
    acts = _rnn_activations(ctx, ["Sigmoid", "Tanh"], len(backwards))
    steps = x.shape[0]
    if not isinstance(steps, (int, np.integer)):
        ctx.refuse("a flexible sequence length cannot be unrolled")
    b = np.zeros((len(backwards), 6 * hidden), np.float32) if b is None else b
    ys, hs = [], []
    for d, backward in enumerate(backwards):
        y, h = _gru_direction(ctx, x, _pick(ctx, w, d), _pick(ctx, r, d), _pick(ctx, b, d),
                              _rnn_state(ctx, 5, d, x, hidden), int(steps), backward, acts[2 * d:2 * d + 2], masks)
        ys.append(y)
        hs.append(h)
    return _rnn_outputs(ctx, ys, hs)


def _gru_direction(ctx: Ctx, x, w, r, b, h, steps: int, backward: bool, acts: list, masks) -> tuple:
    """One direction: outputs [s, b, H] in time order (zeros past a row's sequence length) and the final
    state [b, H]."""
    mb, hidden = ctx.mb, int(w.shape[0]) // 3
    _check_unroll(ctx, steps)
    f, g = acts
    wb, rb = _part(ctx, b, 0, 3 * hidden), _part(ctx, b, 3 * hidden, 6 * hidden)
    # input products for every step at once; the z and r recurrent biases fold into them
    rb_zr = _part(ctx, rb, 0, 2 * hidden)
    rb_zr = np.concatenate([rb_zr, np.zeros(hidden, np.float32)]) if isinstance(rb_zr, np.ndarray) else \
        mb.concat(values=[rb_zr, np.zeros(hidden, np.float32)], axis=0)
    xw = _linear(ctx, x, w, _sum(ctx, wb, rb_zr))
    r_zr, r_h, rb_h = _part(ctx, r, 0, 2 * hidden), _part(ctx, r, 2 * hidden, 3 * hidden), \
        _part(ctx, rb, 2 * hidden, 3 * hidden)
    lbr = bool(ctx.attr("linear_before_reset", 0))
    outputs = [None] * steps
    for t in (reversed(range(steps)) if backward else range(steps)):
        xz, xr, xh = mb.split(x=_step(ctx, xw, t), num_splits=3, axis=-1)
        hz, hr = mb.split(x=_linear(ctx, h, r_zr), num_splits=2, axis=-1)
        z = f(_clipped(ctx, mb.add(x=xz, y=hz)))
        reset = f(_clipped(ctx, mb.add(x=xr, y=hr)))
        if lbr:
            rec = mb.mul(x=reset, y=_linear(ctx, h, r_h, rb_h))
        else:
            rec = _linear(ctx, mb.mul(x=reset, y=h), r_h, rb_h)
        cand = g(_clipped(ctx, mb.add(x=xh, y=rec)))
        h_new = mb.add(x=cand, y=mb.mul(x=z, y=mb.sub(x=h, y=cand)))  # (1 - z) * cand + z * h
        mask = None if masks is None else masks[t]
        outputs[t] = h_new if mask is None else mb.select(cond=mask, a=h_new, b=np.float32(0))
        h = _masked(ctx, mask, h_new, h)
    return mb.stack(values=outputs, axis=0), h


@op("RNN")
def rnn(ctx: Ctx):
    """The simple RNN unrolled over the (static) sequence, any direction, ``layout`` 0/1, ``clip``, any
    activation, ``sequence_lens``, constant or run-time W/R/B: h = f(x W^T + h R^T + Wb + Rb)."""
    w, r, b = (narrow(v) if isinstance(v, np.ndarray) else v for v in (ctx.get(1), ctx.get(2), ctx.get(3)))
    backwards = _directions(ctx)
    hidden = _hidden(ctx, w, 1)
    x, masks = _rnn_input(ctx)
    acts = _rnn_activations(ctx, ["Tanh"], len(backwards))
    steps = x.shape[0]
    if not isinstance(steps, (int, np.integer)):
        ctx.refuse("a flexible sequence length cannot be unrolled")
    _check_unroll(ctx, int(steps))
    ys, hs = [], []
    for d, backward in enumerate(backwards):
        bias = None if b is None else _pick(ctx, b, d)
        bias = None if bias is None else _sum(ctx, _part(ctx, bias, 0, hidden), _part(ctx, bias, hidden, 2 * hidden))
        xw, rd = _linear(ctx, x, _pick(ctx, w, d), bias), _pick(ctx, r, d)
        h, outputs = _rnn_state(ctx, 5, d, x, hidden), [None] * int(steps)
        for t in (reversed(range(int(steps))) if backward else range(int(steps))):
            h_new = acts[d](_clipped(ctx, ctx.mb.add(x=_step(ctx, xw, t), y=_linear(ctx, h, rd))))
            mask = None if masks is None else masks[t]
            outputs[t] = h_new if mask is None else ctx.mb.select(cond=mask, a=h_new, b=np.float32(0))
            h = _masked(ctx, mask, h_new, h)
        ys.append(ctx.mb.stack(values=outputs, axis=0))
        hs.append(h)
    return _rnn_outputs(ctx, ys, hs)
