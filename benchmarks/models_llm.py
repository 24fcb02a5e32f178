"""Transformer-sized benchmark factories built in code (random seeded weights, nothing downloaded):
``bert_base`` (BERT-base, 110M parameters, encoder), ``gpt2`` (GPT-2 small, 124M, decoder with tied LM head) and
``llama_551m`` (a 551M-parameter LLaMA-like decoder, 2.2 GB of fp32 weights: external data).

Each factory returns ``(model, sample_inputs)``.
"""
from __future__ import annotations

import math

import torch
from torch import nn

SEQ = 128


class Attention(nn.Module):
    """Multi-head self-attention with an optional causal mask (written out, as Hugging Face models do)."""

    def __init__(self, d: int, heads: int, causal: bool, bias: bool = True) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.out = nn.Linear(d, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~mask, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class BertLayer(nn.Module):
    def __init__(self, d: int = 768, heads: int = 12, ff: int = 3072) -> None:
        super().__init__()
        self.attn, self.ln1 = Attention(d, heads, causal=False), nn.LayerNorm(d, eps=1e-12)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))
        self.ln2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.ff(x))


class Bert(nn.Module):
    """BERT-base: word + position + token-type embeddings, 12 post-norm layers, pooler."""

    def __init__(self, vocab: int = 30522, d: int = 768, layers: int = 12, positions: int = 512) -> None:
        super().__init__()
        self.words, self.positions, self.types = nn.Embedding(vocab, d), nn.Embedding(positions, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d) for _ in range(layers))
        self.pooler = nn.Linear(d, d)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.ln(self.words(input_ids) + self.positions(pos) + self.types(token_type_ids))
        for layer in self.layers:
            x = layer(x)
        return x, torch.tanh(self.pooler(x[:, 0]))


class GPT2Block(nn.Module):
    def __init__(self, d: int = 768, heads: int = 12) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads, causal=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT2(nn.Module):
    """GPT-2 small: pre-norm decoder, 12 blocks, LM head tied to the token embedding; logits [b, t, 50257]."""

    def __init__(self, vocab: int = 50257, d: int = 768, layers: int = 12, positions: int = 1024) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.blocks = nn.ModuleList(GPT2Block(d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class LlamaBlock(nn.Module):
    def __init__(self, d: int, heads: int, ff: int) -> None:
        super().__init__()
        self.n1, self.attn = RMSNorm(d), Attention(d, heads, causal=True, bias=False)
        self.n2 = RMSNorm(d)
        self.gate, self.up, self.down = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False), \
            nn.Linear(ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.n1(x))
        h = self.n2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """A LLaMA-like decoder (RMSNorm, SwiGLU, untied head); the default sizes give ~551M parameters."""

    def __init__(self, vocab: int = 32000, d: int = 1536, layers: int = 16, heads: int = 16, ff: int = 4096) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, ff) for _ in range(layers))
        self.norm, self.head = RMSNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _ids(vocab: int, seq: int = SEQ) -> torch.Tensor:
    return torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(1))


def bert_base():
    torch.manual_seed(0)
    ids = _ids(30522)
    return Bert().eval(), (ids, torch.zeros_like(ids))


def gpt2():
    torch.manual_seed(0)
    return GPT2().eval(), (_ids(50257),)


def llama_551m():
    torch.manual_seed(0)
    return Llama().eval(), (_ids(32000),)
