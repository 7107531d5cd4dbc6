"""A GPT-2-style causal transformer language model, written here.

`full` is GPT-2 small: 12 layers, 12 heads, width 768, context 1024, vocabulary 50257, input and
output embeddings tied: about 124M parameters. `tiny` is the same code at toy dimensions.
Throughput is counted in tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ddpbench.worker.data import SyntheticDataset
from ddpbench.worker.workload import Workload


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    context: int
    layers: int
    heads: int
    width: int
    batch_size: int


SIZES = {
    "full": GPTConfig(vocab_size=50257, context=1024, layers=12, heads=12, width=768, batch_size=8),
    "tiny": GPTConfig(vocab_size=512, context=64, layers=2, heads=4, width=64, batch_size=8),
}


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.heads = config.heads
        self.norm_attn = nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.attn_out = nn.Linear(config.width, config.width)
        self.norm_mlp = nn.LayerNorm(config.width)
        self.mlp = nn.Sequential(
            nn.Linear(config.width, 4 * config.width),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * config.width, config.width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm_attn(x)).split(width, dim=2)
        # (batch, heads, length, head width) for scaled_dot_product_attention.
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_out(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm_mlp(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.width)
        self.position_embedding = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab_size, bias=False)
        self.head.weight = self.token_embedding.weight  # tied, as in GPT-2

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def gpt2(size: str, data_dir: str | None = None) -> Workload:
    config = SIZES[size]

    def make_sample(generator: torch.Generator) -> tuple:
        tokens = torch.randint(config.vocab_size, (config.context + 1,), generator=generator)
        return tokens[:-1], tokens[1:]

    def make_optimizer(params):
        return torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1)

    return Workload(
        model=GPT(config),
        make_dataset=lambda length: SyntheticDataset(length, make_sample),
        loss=next_token_loss,
        batch_size=config.batch_size,
        sample_unit="tokens",
        units_per_sample=config.context,
        make_optimizer=make_optimizer,
        # The transformer blocks; the embeddings, final norm and the head tied to the token
        # embedding stay with the root (a unit of their own would split the tied weight).
        shard_units=lambda model: list(model.blocks),
    )
