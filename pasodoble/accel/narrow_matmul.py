"""Narrow float32 linear layers on one CPU thread through the project's compiled products.

What: `NarrowLinear` is an `nn.Linear` (same parameters and state dict) whose forward computes `x @ weight.T + bias`
with the kernel's products (`narrow_matmul.c`) in a float32 autograd node whose backward makes its two products the
same way. It applies where `applies(x, weight)` holds: float32 on the CPU, plain tensors, one torch thread, no
autocast, in and out features multiples of 16, and the kernel built; anything else takes the stock `nn.Linear`
path. The forward reads the weight transposed, made once per update pass or generate call (`reuse_transposes`).
`mm(a, b)` is the same product for callers that multiply directly (`update.fused_head`), torch's where the layout does
not fit. Layers that a block calls one after another on the same input (q, k and v; gate and up) share an
`InputGroup` (`group_layers`, which `use_cpu_matmul` calls): the first call runs them all as one autograd node, one
kernel call for the forward, one for the input gradient (a sum over the layers, with no separate additions) and one
for the weight gradients, and the others' calls take their outputs from it.
`accel.cpu_matmul.use_cpu_matmul` turns layers into `NarrowLinear` (`cpu_matmul: auto` on a Zen 4 core for layers
under its oneDNN threshold, `cpu_matmul: native` for every layer it `takes`).

Why: at the tiny anchor's shapes (2,112 rows of 96 to 256 features) torch's BLAS (MKL) packs both operands and
zeroes its output before each product; the kernel reads the activations where they are and writes each output once.
On a Zen 4 core it ran the update's product shapes 1.17x faster than `torch.mm`, and the tiny anchor's update 1.13-1.18x
(docs/PERFORMANCE.md). The sums
are float32 in both; they differ in order only (relative differences around 1e-6, tested).

How it is built: as `accel.train_attention`, by `accel.native` (the system C compiler, `-O3 -march=native`, cached
under `$PASODOBLE_CACHE/native/`). No compiler, or a failed build, leaves torch's products with a one-line warning.
`accel.narrow_matmul: off` (config) turns the kernel off; `accel.layer_groups: off` leaves every layer its own call.

Run: `use_cpu_matmul(model, "native")`; tests in tests/accel/test_narrow_matmul.py and tests/accel/test_layer_groups.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from pathlib import Path

import torch

from pasodoble.accel import native, settings

SOURCE = Path(__file__).parent / "csrc" / "narrow_matmul.c"
KEY = "narrow_matmul"  # its switch, `accel.narrow_matmul`; "off": torch's products always
GROUPS_KEY = (
    "layer_groups"  # its switch, `accel.layer_groups`; "off": no layer groups, every layer its own call
)
MAX_PARTS = 8  # layers one kernel call takes
LANES = 16  # the kernel's vector width: output rows are read and written 16 floats at a time
TN_BLOCK = 128  # rows of A and B the weight gradient sums at a time (both stay in cache across C's tiles)

_state: dict[str, object] = {}  # "lib": {name: C function} or None; "why": the reason it is None


def _bind(lib: ctypes.CDLL):
    p, i = ctypes.c_void_p, ctypes.c_int64
    nn, nn_out, tn = lib.pasodoble_narrow_nn, lib.pasodoble_narrow_nn_out, lib.pasodoble_narrow_tn
    nn.argtypes = [p, i, p, i, i, i]
    nn_out.argtypes = [p, i, i, p, i, i]
    tn.argtypes = [p, i, p, i, i, i, i]
    nn.restype = nn_out.restype = tn.restype = ctypes.c_int
    return {"nn": nn, "nn_out": nn_out, "tn": tn}


def _parts(*fields) -> ctypes.Array:
    """One call's parts for the kernel: an int64 array of their fields, part after part (the C source's FIELDS a
    part)."""
    values = [v for part in zip(*fields, strict=True) for v in part]
    return (ctypes.c_int64 * len(values))(*values)


def _load():
    """The kernel's C functions by name ("nn", "nn_out", "tn"), built and loaded once per process, or None."""
    return native.load(
        _state, SOURCE, KEY, "narrow matmul kernel", _bind, "linear layers take torch's products"
    )


def status() -> str:
    """'on', or why not ('off (...)', 'unavailable: ...'), building the kernel if it was not tried yet."""
    return "on" if _load() is not None else str(_state["why"])


def fits(in_features: int, out_features: int) -> bool:
    """Whether a layer of these sizes runs its forward and backward on the kernel (both multiples of its vector
    width)."""
    return in_features % LANES == 0 and out_features % LANES == 0 and in_features > 0 and out_features > 0


def takes(in_features: int, out_features: int) -> bool:
    """Whether `accel.cpu_matmul` turns a layer of these sizes into a `NarrowLinear`: its in features a multiple of
    16. Where its out features are not (an LM head over a vocabulary of 287), its own forward keeps the stock path and
    the fused head's products (`mm`) run on the kernel all the same."""
    return in_features % LANES == 0 and in_features > 0 and out_features > 0


def _rows(x: torch.Tensor) -> bool:
    """A 2-D float32 CPU tensor whose rows are contiguous."""
    return x.dim() == 2 and x.stride(1) == 1 and x.dtype == torch.float32 and x.device.type == "cpu"


PROFILED = "pasodoble::narrow_mm"  # under torch.profiler each call is an event "PROFILED(m,k,n)" (bench/op_profile.py)


def _seen(m: int, k: int, n: int):
    """Under torch.profiler, an event named with the product's sizes (the profiler cannot see into the kernel);
    nothing otherwise."""
    if torch.autograd._profiler_enabled():
        return torch.profiler.record_function(f"{PROFILED}({m},{k},{n})")
    return contextlib.nullcontext()


def nn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a (M, K) @ b (K, N), rows contiguous in both, N a multiple of 16."""
    return nn_sum([(a, b)])


def nn_sum(pairs) -> torch.Tensor:
    """sum of a_p (M, K_p) @ b_p (K_p, N) over the pairs (a_p, b_p) of `pairs` (1 to MAX_PARTS), rows contiguous in
    every operand, N a multiple of 16: the input gradient of layers that read one input, in one pass."""
    m, n = pairs[0][0].shape[0], pairs[0][1].shape[1]
    out = torch.empty(m, n)
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    with _seen(m, sum(x.shape[1] for x in a), n):
        parts = _parts(
            [x.data_ptr() for x in a], [x.stride(0) for x in a], [y.data_ptr() for y in b],
            [y.stride(0) for y in b], [x.shape[1] for x in a],
        )  # fmt: skip
        code = m and _load()["nn"](parts, len(pairs), out.data_ptr(), n, m, n)
    if code:
        raise ValueError(
            f"narrow matmul: {n} output columns are not a multiple of {LANES}, or too many parts"
        )
    return out


def nn_out(a: torch.Tensor, bs) -> list[torch.Tensor]:
    """[a (M, K) @ b (K, N_p) for b in bs]: the forwards of layers that read `a`, each row tile of it read once for
    all; rows contiguous in every operand, each N_p a multiple of 16."""
    (m, k), widths = a.shape, [b.shape[1] for b in bs]
    outs = [torch.empty(m, w) for w in widths]
    with _seen(m, k, sum(widths)):
        parts = _parts(
            [b.data_ptr() for b in bs],
            [b.stride(0) for b in bs],
            [o.data_ptr() for o in outs],
            widths,
            widths,
        )
        code = m and _load()["nn_out"](a.data_ptr(), a.stride(0), k, parts, len(bs), m)
    if code:
        raise ValueError(
            f"narrow matmul: output widths {widths} are not multiples of {LANES}, or too many parts"
        )
    return outs


def tn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a.T @ b for a (M, N) and b (M, K), rows contiguous in both, K a multiple of 16: (N, K)."""
    return tn_parts([a], b)[0]


def tn_parts(grads, b: torch.Tensor) -> list[torch.Tensor]:
    """[g.T @ b for g in grads], g (M, N_p) and b (M, K), rows contiguous, K a multiple of 16: the weight gradients
    of layers that read `b`, each block of its rows read once for all."""
    (m, k), widths = b.shape, [g.shape[1] for g in grads]
    outs = [torch.empty(w, k) for w in widths]
    with _seen(sum(widths), m, k):
        parts = _parts(
            [g.data_ptr() for g in grads], [g.stride(0) for g in grads], widths, [o.data_ptr() for o in outs],
            [k] * len(grads),
        )  # fmt: skip
        code = _load()["tn"](parts, len(grads), b.data_ptr(), b.stride(0), m, k, TN_BLOCK)
    if code:
        raise ValueError(
            f"narrow matmul: {k} output columns are not a multiple of {LANES}, or too many parts"
        )
    return outs


# per thread, `made`: inside `reuse_transposes()`, {key of a weight: (an alias of it, its transpose)}
_scope = threading.local()


@contextlib.contextmanager
def reuse_transposes():
    """Inside, `transposed` makes a weight's transpose once and reuses it: for a pass of an update or a generate call,
    when the weights cannot change. Outside, every call transposes afresh, so nothing stale is read after a step or a
    load, whatever bumps or skips the version counter. Nested scopes share the outer one; the scope is the calling
    thread's. (`update.fused_head.reuse_head_casts` enters it.)"""
    outer = getattr(_scope, "made", None)
    _scope.made = {} if outer is None else outer
    try:
        yield
    finally:
        _scope.made = outer


def transposed(weight: torch.Tensor) -> torch.Tensor:
    """`weight.T` made contiguous, with zero columns after its own up to a multiple of 16 (a vocabulary of 287 rows
    gives 288 columns); inside `reuse_transposes()` once per weight (keyed on its memory, shape and version; the
    scope holds an alias, so that memory cannot be reused by another tensor while it is a key)."""

    def make(w: torch.Tensor) -> torch.Tensor:
        rows, columns = w.shape
        out = torch.zeros(columns, -(-rows // LANES) * LANES, dtype=w.dtype)
        out[:, :rows] = w.t()
        return out

    made = getattr(_scope, "made", None)
    if made is None:
        return make(weight.detach())
    key = (weight.data_ptr(), tuple(weight.shape), weight.stride(), weight._version)
    if key not in made:
        made[key] = (weight.detach(), make(weight.detach()))
    return made[key][1]


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(M, K) @ (K, N) through the kernel where the operands' layout fits it, else `torch.mm`: `b` a transposed
    weight (any N: the product runs over the padded transpose and returns a view of its first N columns, rows
    contiguous), rows contiguous in both (N a multiple of 16), or `a` a transposed matrix (`b`'s columns a multiple of
    16)."""
    if torch.get_num_threads() == 1 and _load() is not None and a.dtype == b.dtype == torch.float32:
        n = b.shape[1]
        if _rows(a) and b.dim() == 2 and b.stride(0) == 1 and b.stride(1) != 1:  # b = W.T
            return nn(a, transposed(b.t()))[:, :n]
        if n % LANES == 0 and _rows(a) and _rows(b):
            return nn(a, b)
        if n % LANES == 0 and a.dim() == 2 and a.stride(0) == 1 and _rows(a.t()) and _rows(b):  # a = X.T
            return tn(a.t(), b)
    return torch.mm(a, b)


class _Layers(torch.autograd.Function):
    """Linear layers on one input: forward(x, count, *weights, *biases, *transposed weights) -> one output a layer;
    a bias may be None."""

    @staticmethod
    def forward(ctx, x, count, *tensors):
        weights, biases, transposes = tensors[:count], tensors[count : 2 * count], tensors[2 * count :]
        ctx.save_for_backward(x, *weights)
        ctx.has_bias = [b is not None for b in biases]
        ctx.set_materialize_grads(False)  # an output nothing used: None, and its layer no gradient, as apart
        return tuple(layers_forward(x, biases, transposes))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        x, *weights = ctx.saved_tensors
        count, need = len(weights), ctx.needs_input_grad
        grads = [g if g is None else g.contiguous() for g in grads]  # (M, N_p) each
        grad_x, grad_w, grad_b = layers_backward(
            x,
            weights,
            grads,
            need[0],
            need[2 : 2 + count],
            [h and n for h, n in zip(ctx.has_bias, need[2 + count :])],
        )
        return grad_x, None, *grad_w, *grad_b, *([None] * count)


def layers_forward(x: torch.Tensor, biases, transposes) -> list[torch.Tensor]:
    """[x (M, K) @ t + b for t, b in zip(transposes, biases)] in one kernel call; a bias may be None."""
    outs = nn_out(x, transposes)
    for out, bias in zip(outs, biases, strict=True):
        if bias is not None:
            out.add_(bias)
    return outs


def layers_backward(x, weights, grads, need_x: bool, need_w, need_b):
    """(grad of x, [grad of each weight], [grad of each bias]) of `layers_forward` for the output gradients `grads`
    ((M, N_p), rows contiguous; None: that output was not used, and its layer gets no gradient), each computed where
    its `need_*` flag is set (None elsewhere): one kernel call for x's (a sum over the layers), one for the weights'."""
    count = len(weights)
    used = [p for p in range(count) if grads[p] is not None]
    grad_x = nn_sum([(grads[p], weights[p].detach()) for p in used]) if need_x and used else None  # (M, K)
    wanted = [p for p in used if need_w[p]]
    grad_w = [None] * count
    for p, grad in zip(wanted, tn_parts([grads[p] for p in wanted], x) if wanted else []):
        grad_w[p] = grad  # (N_p, K)
    grad_b = [grads[p].sum(0) if p in used and need_b[p] else None for p in range(count)]
    return grad_x, grad_w, grad_b


def linears(x: torch.Tensor, layers) -> tuple[torch.Tensor, ...]:
    """Each layer of `layers` on the 2-D `x`, through one autograd node (see module); every layer must apply."""
    weights = [layer.weight for layer in layers]
    biases = [layer.bias for layer in layers]
    if torch.is_grad_enabled() and (
        x.requires_grad or any(t is not None and t.requires_grad for t in (*weights, *biases))
    ):
        return _Layers.apply(x, len(layers), *weights, *biases, *(transposed(w) for w in weights))
    return tuple(layers_forward(x, biases, [transposed(w) for w in weights]))


def _plain(t: torch.Tensor | None) -> bool:
    return t is None or (type(t) in (torch.Tensor, torch.nn.Parameter) and type(t.data) is torch.Tensor)


def applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether `NarrowLinear` runs a call on these tensors on the kernel (see module)."""
    return (
        x.device.type == "cpu"
        and weight.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and (bias is None or bias.dtype == torch.float32)
        and x.numel() > 0
        and fits(weight.shape[1], weight.shape[0])
        and torch.get_num_threads() == 1
        and not torch.is_autocast_enabled("cpu")
        and _plain(x)
        and _plain(weight)
        and _plain(bias)
        and _load() is not None
    )


class NarrowLinear(torch.nn.Linear):
    """An `nn.Linear` whose float32 products run on the project's kernel where it applies (see module)."""

    head_product = staticmethod(mm)  # the product `update.fused_head` runs for this layer as an LM head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group = self.__dict__.get("input_group")
        out = group.output(self, x) if group is not None else None
        if out is not None:
            return out
        if not applies(x, self.weight, self.bias):
            return super().forward(x)
        return linears(_flat(x), (self,))[0].view(*x.shape[:-1], self.out_features)


def _flat(x: torch.Tensor) -> torch.Tensor:
    """`x` as (M, K) with contiguous rows."""
    flat = x.reshape(-1, x.shape[-1])
    return flat if flat.stride(1) == 1 else flat.contiguous()


class InputGroup:
    """Layers of one block that its forward calls one after another on the same tensor (q, k and v; gate and up):
    the first one's call runs them all in one kernel call (`linears`) and keeps the others' outputs until each of
    them is called on that same tensor (same object, version and grad mode), per thread. Any other call, or one on
    which a layer of the group does not apply, runs that layer alone, so a forward that calls them otherwise still
    computes exactly what it asks for."""

    def __init__(self, layers):
        self.layers = tuple(layers)
        self._held = threading.local()  # .outputs: (x, version, grad mode, {layer index: output}) or None

    def __getstate__(self):  # a copied or pickled model's groups hold its own layers and nothing of this call
        return {"layers": self.layers}

    def __setstate__(self, state):
        self.__init__(state["layers"])

    def output(self, layer: NarrowLinear, x: torch.Tensor) -> torch.Tensor | None:
        """`layer`'s output on `x` from the group's shared call, or None: run it alone."""
        if not _grouping["on"]:
            return None
        if layer is self.layers[0]:
            self._held.outputs = None
            if not all(applies(x, other.weight, other.bias) for other in self.layers):
                return None
            shape = x.shape[:-1]
            outs = [out.view(*shape, out.shape[-1]) for out in linears(_flat(x), self.layers)]
            self._held.outputs = (x, x._version, torch.is_grad_enabled(), dict(enumerate(outs[1:], 1)))
            return outs[0]
        held = getattr(self._held, "outputs", None)
        if held is None or held[0] is not x or held[1] != x._version or held[2] != torch.is_grad_enabled():
            return None
        out = held[3].pop(self.layers.index(layer), None)
        if not held[3]:
            self._held.outputs = None
        return out


GROUPS = (
    ("q_proj", "k_proj", "v_proj"),
    ("gate_proj", "up_proj"),
)  # children read in this order on one input
_grouping = {"on": True}  # False: every group's layers run alone (a bench's arm)


def group_layers(model: torch.nn.Module) -> int:
    """Gives the `NarrowLinear` children of each module named as in `GROUPS`, two or more of one input width, an
    `InputGroup` (SmolLM2's k and v, whose q is wider and runs on oneDNN); returns how many groups it made (none where
    `accel.layer_groups` is off)."""
    if settings.is_off(GROUPS_KEY):
        return 0
    made = 0
    for module in model.modules():
        for names in GROUPS:
            layers = [getattr(module, name, None) for name in names]
            layers = [layer for layer in layers if type(layer) is NarrowLinear]
            if len(layers) >= 2 and len({layer.in_features for layer in layers}) == 1:
                group = InputGroup(layers)
                for layer in layers:
                    layer.input_group = group
                made += 1
    return made
