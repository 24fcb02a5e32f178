"""Small transformer-family models in plain PyTorch: factories for `onnxbridge convert examples/transformers.py:NAME`.

Each factory returns ``(model.eval(), sample_inputs)``; weights are seeded, nothing is downloaded. The models keep
the graph patterns of their families (BERT, Llama, T5, ViT, Swin, wav2vec2, Whisper) at toy sizes, and every
sequence-like axis stays dynamic through export (sizes are read from the inputs, never baked in).
``dynamic_axes(NAME)`` gives the ``--dynamic`` flags each one exports with, e.g.

    onnxbridge convert examples/transformers.py:llama_decoder -o llama.onnx --opset 17 \\
        --dynamic input_ids:0:batch:1..4 --dynamic input_ids:1:seq:2..24
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

NEG = -1e4  # additive mask value: large enough to zero a softmax weight, small enough for fp16


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None,
            scale: float = 1.0) -> torch.Tensor:
    """Softmax attention over (batch, heads, seq, dim) tensors, scores scaled by ``scale``, with an additive ``bias``
    broadcast to them."""
    scores = (q @ k.transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    return torch.softmax(scores, dim=-1) @ v


class SelfAttention(nn.Module):
    """Multi-head self-attention with separate q/k/v/o projections; heads are split by reshapes of the input's own
    batch and sequence sizes."""

    def __init__(self, d: int, heads: int, bias: bool = True) -> None:
        super().__init__()
        self.heads, self.scale = heads, (d // heads) ** -0.5
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=bias) for _ in range(4))

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return x.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        b, h, s, e = x.shape
        return self.o(x.transpose(1, 2).reshape(b, s, h * e))

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        return self.merge(_attend(q, k, v, bias, self.scale))


def _positions(ids: torch.Tensor) -> torch.Tensor:
    """0..S-1 along axis 1 of ``ids`` (B, S), built from the input so the sequence length stays dynamic."""
    return torch.cumsum(torch.ones_like(ids), dim=1) - 1


# --- BERT -------------------------------------------------------------------------------------------------------
class BertLayer(nn.Module):
    """Post-norm encoder layer: attention + residual + LayerNorm, exact-GELU MLP + residual + LayerNorm."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d, eps=1e-12), nn.LayerNorm(d, eps=1e-12)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, bias))
        return self.ln2(x + self.mlp(x))


class BertEncoder(nn.Module):
    """Word + position + token-type embeddings, LayerNorm, encoder layers masked by ``attention_mask``, and a
    tanh pooler over the first token."""

    def __init__(self, vocab: int = 100, d: int = 48, heads: int = 4, layers: int = 2, max_pos: int = 64) -> None:
        super().__init__()
        self.words, self.pos, self.types = nn.Embedding(vocab, d), nn.Embedding(max_pos, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d, heads) for _ in range(layers))
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.ln(self.words(input_ids) + self.pos(_positions(input_ids)) + self.types(token_type_ids))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * NEG  # padding: keys masked out
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pooler(x[:, 0]))


# --- Llama ------------------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (Llama and T5 norms: no mean subtraction, no bias)."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaLayer(nn.Module):
    """Pre-RMSNorm decoder layer: rotary (cos/sin) causal attention, SiLU-gated MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads, bias=False)
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.gate, self.up, self.down = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False), \
            nn.Linear(2 * d, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        a = self.attn
        q, k, v = a.split(a.q(h)), a.split(a.k(h)), a.split(a.v(h))
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        x = x + a.merge(_attend(q, k, v, bias, a.scale))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LlamaDecoder(nn.Module):
    """Token embeddings, rotary position embeddings from positions 0..S-1, causal decoder layers, final RMSNorm
    and an LM head."""

    def __init__(self, vocab: int = 100, d: int = 64, heads: int = 4, layers: int = 2, theta: float = 10000.0) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(LlamaLayer(d, heads) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        dim = d // heads
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        pos = _positions(input_ids[:1]).to(x.dtype)[0]  # (S,)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        causal = (pos[None, :] > pos[:, None]).to(x.dtype) * NEG  # key after query: masked
        for layer in self.layers:
            x = layer(x, cos, sin, causal[None, None])
        return self.head(self.norm(x))


# --- T5 ---------------------------------------------------------------------------------------------------------
def relative_buckets(relative: torch.Tensor, buckets: int = 16, max_distance: int = 32) -> torch.Tensor:
    """T5's bidirectional relative-position buckets: exact for small distances, logarithmic up to
    ``max_distance``."""
    buckets //= 2
    out = (relative > 0).to(torch.long) * buckets
    n = relative.abs()
    exact = buckets // 2
    is_small = n < exact
    large = exact + (torch.log(n.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                     * (buckets - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, buckets - 1))
    return out + torch.where(is_small, n, large)


class T5Layer(nn.Module):
    """Pre-RMSNorm layer: unscaled attention with a shared position bias, ReLU MLP without biases."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads, bias=False)
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d, bias=False), nn.ReLU(), nn.Linear(2 * d, d, bias=False))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h, a = self.norm1(x), self.attn
        x = x + a.merge(_attend(a.split(a.q(h)), a.split(a.k(h)), a.split(a.v(h)), bias))  # T5: unscaled
        return x + self.mlp(self.norm2(x))


class T5Encoder(nn.Module):
    """Embeddings, a relative position bias (bucketed query-key distances) plus the padding mask, encoder layers
    and a final RMSNorm."""

    def __init__(self, vocab: int = 100, d: int = 32, heads: int = 4, layers: int = 2, buckets: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rel = nn.Embedding(buckets, heads)
        self.buckets = buckets
        self.layers = nn.ModuleList(T5Layer(d, heads) for _ in range(layers))
        self.norm = RMSNorm(d)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        pos = _positions(input_ids[:1])[0]
        bucket = relative_buckets(pos[None, :] - pos[:, None], self.buckets)  # (S, S): key minus query
        bias = self.rel(bucket).permute(2, 0, 1)[None] + (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * NEG
        for layer in self.layers:
            x = layer(x, bias)
        return self.norm(x)


# --- ViT --------------------------------------------------------------------------------------------------------
class PreNormLayer(nn.Module):
    """Pre-LayerNorm encoder layer (ViT, Whisper): attention and exact-GELU MLP, each with a residual."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """Conv patch embedding, a class token, position embeddings bicubically interpolated to the input's patch grid,
    pre-norm layers and a head on the class token."""

    def __init__(self, d: int = 48, heads: int = 4, layers: int = 2, patch: int = 8, grid: int = 4,
                 classes: int = 10) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, 1 + grid * grid, d) * 0.02)
        self.grid = grid
        self.layers = nn.ModuleList(PreNormLayer(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def position(self, h: int, w: int) -> torch.Tensor:
        """The class token's position embedding, then the patch grid's resized to (h, w)."""
        d = self.pos.shape[-1]
        grid = self.pos[:, 1:].reshape(1, self.grid, self.grid, d).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False)
        return torch.cat((self.pos[:, :1], grid.flatten(2).transpose(1, 2)), dim=1)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        p = self.patch(pixel_values)  # (B, d, h, w)
        x = p.flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.position(p.shape[2], p.shape[3])
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln(x[:, 0]))


# --- Swin -------------------------------------------------------------------------------------------------------
def window_partition(x: torch.Tensor, ws: int) -> torch.Tensor:
    """(B, H, W, C) -> (B * H/ws * W/ws, ws*ws, C) through a rank-6 reshape."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, ws * ws, c)


def window_reverse(windows: torch.Tensor, ws: int, h: int, w: int) -> torch.Tensor:
    """(B * H/ws * W/ws, ws*ws, C) -> (B, H, W, C): the inverse of ``window_partition``."""
    c = windows.shape[-1]
    x = windows.reshape(-1, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


def shifted_window_mask(h: int, w: int, ws: int, shift: int) -> torch.Tensor:
    """(windows, ws*ws, ws*ws) additive mask: after a cyclic shift, tokens from different image regions that share a
    window do not attend to each other."""
    region = torch.zeros(1, h, w, 1)
    cuts = (slice(0, -ws), slice(-ws, -shift), slice(-shift, None))
    for i, (hs, wsl) in enumerate((a, b) for a in cuts for b in cuts):
        region[:, hs, wsl, :] = i
    ids = window_partition(region, ws).squeeze(-1)
    return (ids[:, None, :] != ids[:, :, None]).float() * NEG


class SwinBlock(nn.Module):
    """Two Swin blocks at a fixed resolution: window attention with a relative position bias table, then shifted-window
    attention (torch.roll by half a window, the region mask), each with an exact-GELU MLP."""

    def __init__(self, d: int = 32, heads: int = 4, size: int = 8, ws: int = 4) -> None:
        super().__init__()
        self.size, self.ws = size, ws
        self.attn = nn.ModuleList(SelfAttention(d, heads) for _ in range(2))
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(2))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(2))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(2))
        self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + ws - 1
        self.register_buffer("rel_index", rel[..., 0] * (2 * ws - 1) + rel[..., 1], persistent=False)
        self.register_buffer("mask", shifted_window_mask(size, size, ws, ws // 2), persistent=False)

    def block(self, x: torch.Tensor, i: int, shift: int) -> torch.Tensor:
        b, length, c = x.shape
        h = self.ln1[i](x).reshape(b, self.size, self.size, c)
        if shift:
            h = torch.roll(h, shifts=(-shift, -shift), dims=(1, 2))
        windows = window_partition(h, self.ws)
        bias = self.table[self.rel_index].permute(2, 0, 1)[None]  # (1, heads, ws*ws, ws*ws)
        if shift:  # (windows, heads, n, n) tiled over the batch: windows are batch-major
            bias = (bias + self.mask[:, None]).repeat(b, 1, 1, 1)
        h = window_reverse(self.attn[i](windows, bias), self.ws, self.size, self.size)
        if shift:
            h = torch.roll(h, shifts=(shift, shift), dims=(1, 2))
        x = x + h.reshape(b, length, c)
        return x + self.mlp[i](self.ln2[i](x))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.block(self.block(hidden_states, 0, 0), 1, self.ws // 2)


# --- wav2vec2 ---------------------------------------------------------------------------------------------------
class Wav2Vec2Features(nn.Module):
    """The conv feature encoder (GroupNorm'd first conv, strided convs, exact GELU), the feature projection, and the
    grouped positional conv (even kernel, padding kernel/2, last step dropped) added before the encoder LayerNorm."""

    def __init__(self, d: int = 32, conv: int = 32, pos_kernel: int = 8, pos_groups: int = 4) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, conv, 10, stride=5, bias=False),
                                    nn.Conv1d(conv, conv, 3, stride=2, bias=False),
                                    nn.Conv1d(conv, conv, 2, stride=2, bias=False)])
        self.norm0 = nn.GroupNorm(conv, conv)
        self.proj_ln = nn.LayerNorm(conv)
        self.proj = nn.Linear(conv, d)
        self.pos_conv = nn.Conv1d(d, d, pos_kernel, padding=pos_kernel // 2, groups=pos_groups)
        self.ln = nn.LayerNorm(d)

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        x = input_values[:, None]
        for i, conv in enumerate(self.convs):
            x = conv(x)
            x = F.gelu(self.norm0(x) if i == 0 else x)
        x = self.proj(self.proj_ln(x.transpose(1, 2)))  # (B, T', d)
        pos = F.gelu(self.pos_conv(x.transpose(1, 2))[:, :, :-1])  # even kernel: drop the extra step
        return self.ln(x + pos.transpose(1, 2))


# --- Whisper ----------------------------------------------------------------------------------------------------
def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> torch.Tensor:
    """Whisper's sinusoidal position table: sin over the first half of the channels, cos over the second."""
    inc = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2).float())
    t = torch.arange(length).float()[:, None] * inv[None, :]
    return torch.cat((t.sin(), t.cos()), dim=1)


class WhisperEncoder(nn.Module):
    """Two convs with exact GELU (the second strided), sinusoidal positions sliced to the input's length, pre-norm
    layers and a final LayerNorm."""

    def __init__(self, mels: int = 16, d: int = 32, heads: int = 4, layers: int = 2, max_frames: int = 128) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(mels, d, 3, padding=1)
        self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
        self.register_buffer("positions", sinusoids(max_frames // 2, d), persistent=False)
        self.layers = nn.ModuleList(PreNormLayer(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(input_features)))).transpose(1, 2)
        x = x + self.positions[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.ln(x)


# --- factories --------------------------------------------------------------------------------------------------
def _ids(batch: int, seq: int, vocab: int = 100) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq))


def _mask(batch: int, seq: int) -> torch.Tensor:
    """Ones with the last tokens of all but the first row padded (zeros)."""
    mask = torch.ones(batch, seq, dtype=torch.long)
    for row in range(1, batch):
        mask[row, seq - 2 * row:] = 0
    return mask


def bert_encoder():
    torch.manual_seed(0)
    types = torch.zeros(2, 12, dtype=torch.long)
    types[:, 6:] = 1
    return BertEncoder().eval(), (_ids(2, 12), _mask(2, 12), types)


def llama_decoder():
    torch.manual_seed(0)
    return LlamaDecoder().eval(), (_ids(2, 10),)


def t5_encoder():
    torch.manual_seed(0)
    return T5Encoder().eval(), (_ids(2, 20), _mask(2, 20))


def vit():
    torch.manual_seed(0)
    return ViT().eval(), (torch.randn(2, 3, 40, 48),)  # a 5x6 patch grid: position embeddings interpolated


def swin_block():
    torch.manual_seed(0)
    return SwinBlock().eval(), (torch.randn(2, 64, 32),)


def wav2vec2_features():
    torch.manual_seed(0)
    return Wav2Vec2Features().eval(), (torch.randn(2, 400),)


def whisper_encoder():
    torch.manual_seed(0)
    return WhisperEncoder().eval(), (torch.randn(2, 16, 60),)


MODELS = ("bert_encoder", "llama_decoder", "t5_encoder", "vit", "swin_block", "wav2vec2_features", "whisper_encoder")

_SEQ = {"bert_encoder": ("input_ids", "attention_mask", "token_type_ids"), "llama_decoder": ("input_ids",),
        "t5_encoder": ("input_ids", "attention_mask"), "vit": ("pixel_values",), "swin_block": ("hidden_states",),
        "wav2vec2_features": ("input_values",), "whisper_encoder": ("input_features",)}
_SEQ_AXIS = {"bert_encoder": (1, "4..32"), "llama_decoder": (1, "2..24"), "t5_encoder": (1, "4..40"),
             "wav2vec2_features": (1, "200..800"), "whisper_encoder": (2, "16..120")}  # axis, sizes also validated


def flexible_axes(name: str) -> list[str]:
    """The ``--dynamic`` specs of a flexible Core ML package of ``name``: its sequence axis (ViT: the image size),
    or for Swin, which has none, its batch."""
    return dynamic_axes(name, batch=name == "swin_block")


def dynamic_axes(name: str, batch: bool = True, seq: bool = True) -> list[str]:
    """The ``--dynamic`` specs ``name`` exports with: batch on every input, the sequence axis where it has one
    (ViT: image height and width, other patch grids; Swin: batch only, its window mask is built for one
    resolution), each with sizes that validation also checks."""
    specs = []
    for inp in _SEQ[name]:
        if batch:
            specs.append(f"{inp}:0:batch:1..4")
        if seq and name in _SEQ_AXIS:
            axis, sizes = _SEQ_AXIS[name]
            specs.append(f"{inp}:{axis}:seq:{sizes}")
        if seq and name == "vit":
            specs += [f"{inp}:2:height:24..64", f"{inp}:3:width:24..64"]
    return specs
