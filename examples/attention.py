"""A transformer block written the slow way."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.view(b, n, self.heads, d // self.heads).permute(0, 2, 1, 3)
        k = k.view(b, n, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, n, self.heads, d // self.heads).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        mask = torch.triu(torch.ones(n, n, device=x.device), diagonal=1).bool()  # rebuilt on every call
        scores = scores.masked_fill(mask, float("-inf"))
        attn = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        attn = attn / torch.log(torch.sum(torch.exp(attn), dim=-1, keepdim=True))  # PFL502: logsumexp
        out = (attn @ v).transpose(1, 2).contiguous().view(b, n, d)  # merging heads: this copy is needed
        out = self.proj(out)
        # PFL501: five pointwise kernels where one fused kernel would do
        h = (out - out.mean(-1, keepdim=True)) * torch.rsqrt(out.var(-1, keepdim=True) + 1e-5) * self.gamma + self.beta
        return F.gelu(h) + x


class GatedMLP(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.gate = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        tokens = x.reshape(-1, x.shape[-1])
        g = torch.log(1 + torch.exp(self.gate(tokens)))  # PFL502: softplus/log1p
        z = self.up(tokens).double()  # PFL202: float64 on the device
        return self.down((z * g).float()).view(x.shape)


def rotary(x: torch.Tensor, steps: int) -> torch.Tensor:
    freqs = torch.arange(x.shape[-1] // 2, dtype=torch.float64, device=x.device)  # PFL202
    outputs = []
    for t in range(steps):
        angle = torch.arange(x.shape[-1] // 2) * 0.01  # PFL401: the same tensor every step
        outputs.append(x[..., ::2] * torch.cos(angle + t) - x[..., 1::2] * torch.sin(angle + t * freqs[0].item()))
    return torch.stack(outputs)
