"""A decoder layer's forward and backward as one autograd node, for the update's packed rows on one CPU thread.

What: `use_fused_blocks(model)` turns each decoder layer of transformers' Llama, Qwen2 and Qwen3 (`BLOCKS`) into a
subclass (same parameters, state dict and module tree) whose forward runs the whole layer (norm, q, k and v, Qwen3's
q and k norms, rotary embedding, attention over the packed rows' spans, o, residual, norm, gate and up, SiLU gate,
down, residual) as one autograd node, `_Block`, which calls the project's kernels one after another and whose
backward does the same in reverse. It does so where every piece would have taken its kernel anyway (`serves`):
a call with `packed_segments=` (the update's rows, `update.segment_attention`) and no cache, float32 on the CPU with one
torch thread and no autocast, every linear layer a `NarrowLinear` the kernel takes (no bias in the MLP), the norms,
rotary embedding and MLP turned by `accel.fused_layers`, no attention dropout or sliding window, and no hook on the
layer's modules but transformers' output capturing (the attention weights it would capture are None on this path),
and no saved-tensor hooks (activation checkpointing, offloading: the node keeps its intermediates itself and frees
each as its backward reads it, which those hooks would not see; its backward runs once, no `retain_graph`).
Anything else takes the layer's own forward, which computes the same through the same kernels.
`accel.fused_blocks: off` (config) turns it off; `status()` says whether it can be on, for the start line.

Why: on the tiny anchor (4 layers of width 96) the kernels did about four fifths of the update's work and the rest was
Python, dispatcher and allocator cost around them, much of it the layers' 20-odd autograd nodes, their modules' calls
and transformers' code (docs/PERFORMANCE.md). One node a layer keeps the kernel calls and drops most of the rest.
The values are those of the layer's own forward: the same kernels on the same inputs in the same order.

Run: `use_fused_blocks(model)` once after `accel.cpu_matmul.use_cpu_matmul` and `accel.fused_layers.use_fused_layers`;
the Role does it for every model it loads. Tests in tests/accel/test_fused_block.py.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from pasodoble.accel import fused_layers, narrow_matmul, settings, train_attention
from pasodoble.update.segment_attention import SegmentLayout, attends_per_sample

KEY = "fused_blocks"  # its switch, `accel.fused_blocks`; "off": every layer runs its own forward
BLOCKS = ("LlamaDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer")
CAPTURE_HOOK = "output_capturing_hook"  # transformers' hook that records a module's outputs when asked to


def status() -> str:
    """'on', or why not, for the start line and benches."""
    if settings.is_off(KEY):
        return f"off (accel.{KEY})"
    kernels = {"layer": fused_layers, "narrow matmul": narrow_matmul, "attention": train_attention}
    missing = [name for name, module in kernels.items() if module.status() != "on"]
    return f"off (no {', '.join(missing)} kernel)" if missing else "on"


def _linear_ok(layer, bias_allowed: bool = True) -> bool:
    return (
        type(layer) is narrow_matmul.NarrowLinear
        and narrow_matmul.fits(layer.in_features, layer.out_features)
        and (bias_allowed or layer.bias is None)
    )


def _linears(block) -> list:
    attn, mlp = block.self_attn, block.mlp
    return [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]


def _hooks_ok(block: torch.nn.Module) -> bool:
    """No hook on the block's modules would see a difference: none but transformers' output capturing."""
    for module in block.modules():
        if module is block:
            continue
        if module._backward_hooks or module._backward_pre_hooks or module._forward_pre_hooks:
            return False
        if any(getattr(hook, "__name__", "") != CAPTURE_HOOK for hook in module._forward_hooks.values()):
            return False
    hooks = torch.nn.modules.module
    return not (
        hooks._global_forward_hooks or hooks._global_forward_pre_hooks or hooks._global_backward_hooks
    )


def _parts(block) -> tuple:
    """The block's tensors in `_Block`'s order (None for an absent bias or q/k norm)."""
    attn, mlp = block.self_attn, block.mlp
    q_norm, k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    return (
        block.input_layernorm.weight,
        attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight,
        attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias,
        None if q_norm is None else q_norm.weight, None if k_norm is None else k_norm.weight,
        attn.o_proj.weight, attn.o_proj.bias,
        block.post_attention_layernorm.weight,
        mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight,
    )  # fmt: skip


def _saved_tensor_hooks_active() -> bool:
    """Whether saved-tensor hooks are on (activation checkpointing, offloading): they see only what
    `save_for_backward` saves, and `_Block` keeps its own intermediates (True where torch cannot say)."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top is None or top(False) is not None


def serves(block, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether `_Block` runs this call of `block` on `x` (R, L, width) with rotary `cos`, `sin` (see module)."""
    attn, mlp = block.self_attn, block.mlp
    norms = [block.input_layernorm, block.post_attention_layernorm]
    if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
        norms += [getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)]
    config = attn.config
    rows, length = x.shape[:2] if x.dim() == 3 else (0, 0)
    return bool(
        x.dim() == 3
        and x.numel() > 0
        and getattr(cos, fused_layers.MARK, False)
        and fused_layers.rope_tables_serve(cos, sin, rows, length, attn.head_dim)
        and all(n is not None and fused_layers.is_turned(n) for n in (*norms, mlp))
        and all(_linear_ok(layer, bias_allowed=k < 4) for k, layer in enumerate(_linears(block)))
        and (not block.training or not attn.attention_dropout)
        and getattr(attn, "sliding_window", None) is None
        and fused_layers.serves(x, *(n.weight for n in norms))
        and all(narrow_matmul.applies(x, layer.weight, layer.bias) for layer in _linears(block))
        and not torch.is_autocast_enabled("cpu")
        and not (torch.is_grad_enabled() and _saved_tensor_hooks_active())
        and train_attention.fits(
            config.num_attention_heads, config.num_key_value_heads, length, length, attn.head_dim
        )
        and _hooks_ok(block)
    )


class _Spec:
    """A block's sizes and constants, as `_Block` reads them."""

    def __init__(self, block, x, layout: SegmentLayout):
        attn = block.self_attn
        self.rows, self.length, self.width = x.shape
        self.heads, self.kv_heads = attn.config.num_attention_heads, attn.config.num_key_value_heads
        self.dim, self.scale = attn.head_dim, float(attn.scaling)
        norm_of = {
            "in": block.input_layernorm, "post": block.post_attention_layernorm,
            "q": getattr(attn, "q_norm", None), "k": getattr(attn, "k_norm", None),
        }  # fmt: skip
        self.eps = {k: None if n is None else float(n.variance_epsilon) for k, n in norm_of.items()}
        self.bounds = layout.bounds


def _heads(x: torch.Tensor, spec: _Spec, heads: int) -> torch.Tensor:
    """(M, heads * D) rows as a (R, heads, L, D) view."""
    return x.view(spec.rows, spec.length, heads, spec.dim).transpose(1, 2)


def _heads_forward(raw, weight, eps, cos, sin, spec: _Spec):
    """(the heads of `raw` (M, heads * D), normed where `weight` is given (Qwen3's q and k norms) and rotated, as a
    (R, heads, L, D) view; the norm's reciprocal RMS or None). The normed copy is freed on return, so that the next
    buffer reuses its memory while it is in cache."""
    normed, rstd = (
        fused_layers.norm_forward(raw.view(-1, spec.dim), weight, eps) if weight is not None else (raw, None)
    )
    heads = _heads(normed, spec, raw.shape[1] // spec.dim)
    return fused_layers.rope_apply(heads, cos, sin, heads, backward=False), rstd


def _heads_backward(grad, raw, weight, rstd, cos, sin, spec: _Spec, want_weight: bool):
    """(the gradient of `raw` (M, heads * D), of the norm's weight or None) of `_heads_forward` for `grad`, its
    output's gradient as a (R, heads, L, D) tensor of any layout."""
    like = _heads(torch.empty_like(raw), spec, raw.shape[1] // spec.dim)  # rotated back into raw's layout
    flat = fused_layers.rope_apply(grad, cos, sin, like, backward=True).transpose(1, 2).reshape(raw.shape)
    if weight is None:
        return flat, None
    rows = flat.view(-1, spec.dim)
    d, d_weight = fused_layers.norm_backward(raw.view(-1, spec.dim), weight, rstd, rows, want_weight)
    return d.view(raw.shape), d_weight


def _forward(spec: _Spec, x, cos, sin, params, keep: bool):
    """The block's output on x (M, width); with `keep`, also what the backward reads."""
    w_in, wq, wk, wv, bq, bk, bv, wqn, wkn, wo, bo, w_post, wg, wu, wd = params
    t = narrow_matmul.transposed
    h1, r1 = fused_layers.norm_forward(x, w_in, spec.eps["in"])
    q, k, v = narrow_matmul.layers_forward(h1, (bq, bk, bv), (t(wq), t(wk), t(wv)))
    qr, rq = _heads_forward(q, wqn, spec.eps["q"], cos, sin, spec)  # q and k normed and rotated
    kr, rk = _heads_forward(k, wkn, spec.eps["k"], cos, sin, spec)
    v4 = _heads(v, spec, spec.kv_heads)
    att, lse = train_attention.forward_spans(qr, kr, v4, spec.bounds, spec.length, spec.scale)  # (R, L, H, D)
    a = att.view(x.shape[0], -1)
    (o,) = narrow_matmul.layers_forward(a, (bo,), (t(wo),))
    h = o.add_(x)
    h2, r2 = fused_layers.norm_forward(h, w_post, spec.eps["post"])
    g, u = narrow_matmul.nn_out(h2, [t(wg), t(wu)])
    m = fused_layers.silu_mul_forward(g, u)
    (d,) = narrow_matmul.nn_out(m, [t(wd)])
    y = d.add_(h)
    if not keep:
        return y, None
    return y, [h1, r1, q, k, rq, rk, qr, kr, v4, att, lse, h, h2, r2, g, u, m]


class _Block(torch.autograd.Function):
    """forward(x (M, width), cos, sin, spec, *`_parts`) -> the block's output (M, width)."""

    @staticmethod
    def forward(ctx, x, cos, sin, spec, *params):
        y, kept = _forward(spec, x, cos, sin, params, keep=True)
        ctx.save_for_backward(x, cos, sin, *params)
        ctx.kept, ctx.spec = kept, spec
        return y

    @staticmethod
    @once_differentiable  # its backward is the kernels': no second derivative
    def backward(ctx, dy):
        spec, need = ctx.spec, ctx.needs_input_grad
        x, cos, sin, *params = ctx.saved_tensors
        w_in, wq, wk, wv, bq, bk, bv, wqn, wkn, wo, bo, w_post, wg, wu, wd = params
        kept = ctx.kept  # each freed below once read, as autograd frees a node's saved tensors
        ctx.kept = None
        if kept is None:
            raise RuntimeError(
                f"a fused decoder layer's backward runs once (no retain_graph); set accel.{KEY}=off to run it again"
            )
        h1, r1, q, k, rq, rk, qr, kr, v4, att, lse, h, h2, r2, g, u, m = kept
        kept.clear()
        grads = [None] * 15
        dy = dy.contiguous()
        # the MLP and its residual
        dm, (grads[14],), _ = narrow_matmul.layers_backward(m, (wd,), (dy,), True, need[18:19], (False,))
        del m
        dg, du = fused_layers.silu_mul_backward(g, u, dm)
        del g, u, dm
        dh2, (grads[12], grads[13]), _ = narrow_matmul.layers_backward(
            h2, (wg, wu), (dg, du), True, need[16:18], (False, False)
        )
        del h2, dg, du
        dh, grads[11] = fused_layers.norm_backward(h, w_post, r2, dh2, need[15])
        del h, dh2
        dh.add_(dy)
        # attention and its residual
        da, (grads[9],), (grads[10],) = narrow_matmul.layers_backward(
            att.view(x.shape[0], -1), (wo,), (dh,), True, need[13:14], (bo is not None and need[14],)
        )
        dq, dk, dv = train_attention.backward_spans(
            qr, kr, v4, att, lse, spec.bounds, spec.length, spec.scale, da.view(att.shape)
        )
        del qr, kr, v4, att, lse, da
        dqn, grads[7] = _heads_backward(dq.transpose(1, 2), q, wqn, rq, cos, sin, spec, need[11])
        del dq, q
        dkn, grads[8] = _heads_backward(dk, k, wkn, rk, cos, sin, spec, need[12])
        del dk, k
        dv = dv.transpose(1, 2).reshape(x.shape[0], -1)
        need_b = tuple(b is not None and n for b, n in zip((bq, bk, bv), need[8:11], strict=True))
        dh1, grads[1:4], grads[4:7] = narrow_matmul.layers_backward(
            h1, (wq, wk, wv), (dqn, dkn, dv), True, need[5:8], need_b
        )
        del h1, dqn, dkn, dv
        dx, grads[0] = fused_layers.norm_backward(x, w_in, r1, dh1, need[4])
        dx.add_(dh)
        return dx, None, None, None, *grads


def block_forward(block, x, cos, sin, layout: SegmentLayout) -> torch.Tensor:
    """The block's output on x (R, L, width) through `_Block` (`serves` must hold)."""
    spec = _Spec(block, x, layout)
    layout.reads.append(spec.rows)
    flat = x.reshape(-1, spec.width)
    params = _parts(block)
    if torch.is_grad_enabled() and (
        x.requires_grad or any(p is not None and p.requires_grad for p in params)
    ):
        y = _Block.apply(flat, cos, sin, spec, *params)
    else:
        y = _forward(spec, flat, cos, sin, params, keep=False)[0]
    return y.view(x.shape)


def _block_layer_forward(
    self, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
    position_embeddings=None, **kwargs,
):  # fmt: skip
    layout = kwargs.get("packed_segments")
    if (
        _fusing["on"]
        and isinstance(layout, SegmentLayout)
        and cache is None
        and kwargs.get("past_key_values") is None
        and position_embeddings is not None
        and attends_per_sample(self.self_attn)
        and serves(self, hidden_states, *position_embeddings)
    ):
        return block_forward(self, hidden_states, *position_embeddings, layout)
    return self._stock_forward(  # the class's own, not super(type(self)): FSDP2 subclasses the layer again
        hidden_states, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
        use_cache=use_cache, position_embeddings=position_embeddings, **kwargs,
    )  # fmt: skip


_fused_classes: dict[type, type] = {}
_fusing = {"on": True}  # False: every layer runs its own forward (a bench's arm)


def use_fused_blocks(model: torch.nn.Module) -> int:
    """Turns `model`'s decoder layers of `BLOCKS` into their fused subclasses (see module); returns how many it
    turned (none where `accel.fused_blocks` is off)."""
    if settings.is_off(KEY):
        return 0
    turned = 0
    for module in model.modules():
        cls = type(module)
        if cls.__name__ not in BLOCKS or not cls.__module__.startswith("transformers.models."):
            continue
        if cls not in _fused_classes:
            _fused_classes[cls] = type(
                f"FusedBlock{cls.__name__}",
                (cls,),
                {"forward": _block_layer_forward, "_stock_forward": cls.forward, "__module__": __name__},
            )
        module.__class__ = _fused_classes[cls]
        turned += 1
    return turned
