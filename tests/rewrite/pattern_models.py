"""Small models with the patterns of issue 15 that the HF zoo shows only at full cost: residual
adds in a wrapper module beside each block (x-transformers style) and a parallel block."""

from __future__ import annotations

import torch
from torch import nn
from unitcheck.models.gpt import MLP, CausalSelfAttention, GPTConfig
from unitcheck.models.layers import lm_output


def _tiny_lm(cls, *args):  # type: ignore[no-untyped-def]
    """One layer, width 16, a batch of 2 x 8 tokens and shifted targets, seeded."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=32, block_size=16, n_layer=1, n_embd=16, n_head=2)
    idx = torch.randint(0, 32, (2, 8))
    return cls(cfg, *args), (idx, idx.roll(1, 1))


class Residual(nn.Module):
    """The residual add as a module of its own, called beside the block it adds."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return x + residual


class WrapperLM(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList()
        for _ in range(cfg.n_layer):
            for block in (CausalSelfAttention(cfg), MLP(cfg)):
                self.layers.append(nn.ModuleList([nn.LayerNorm(cfg.n_embd), block, Residual()]))
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        for norm, block, residual in self.layers:  # type: ignore[misc]
            x = residual(block(norm(x)), x)
        return lm_output(self.head(self.norm(x)), targets)


def wrapper_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(WrapperLM)


class SquaredHead(WrapperLM):
    """Logits squared before the loss: no rule makes them dimensionless."""

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        for norm, block, residual in self.layers:  # type: ignore[misc]
            x = residual(block(norm(x)), x)
        return lm_output(self.head(self.norm(x)).pow(2), targets)


def squared_head():  # type: ignore[no-untyped-def]
    return _tiny_lm(SquaredHead)  # the same seeded weights as wrapper_lm's


class SplitKeyAttention(nn.Module):
    """DeepSeek's multi-head latent attention in small: each key is two parts from two
    projections (a normalised latent and a separate positional part), concatenated with ``cat``
    or written into an empty tensor slice by slice (``slice_scatter``)."""

    def __init__(self, cfg: GPTConfig, scatter: bool) -> None:
        super().__init__()
        self.n_head, self.scatter = cfg.n_head, scatter
        hd = cfg.n_embd // cfg.n_head
        self.nope, self.pe = hd // 2, hd - hd // 2
        self.q_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.kv_a = nn.Linear(cfg.n_embd, cfg.n_embd // 2, bias=False)
        self.kv_norm = nn.LayerNorm(cfg.n_embd // 2)
        self.kv_b = nn.Linear(cfg.n_embd // 2, cfg.n_head * (self.nope + hd), bias=False)
        self.k_pe = nn.Linear(cfg.n_embd, self.pe, bias=False)
        self.o_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hd = C // self.n_head
        q = self.q_proj(x).view(B, T, self.n_head, hd).transpose(1, 2)
        kv = self.kv_b(self.kv_norm(self.kv_a(x))).view(B, T, self.n_head, self.nope + hd).transpose(1, 2)
        k_nope, v = kv.split([self.nope, hd], dim=-1)
        k_pe = self.k_pe(x).view(B, 1, T, self.pe).expand(B, self.n_head, T, self.pe)
        if self.scatter:
            k = k_nope.new_empty(B, self.n_head, T, hd)
            k[..., : self.nope] = k_nope
            k[..., self.nope :] = k_pe
        else:
            k = torch.cat([k_nope, k_pe], dim=-1)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class SplitKeyLM(nn.Module):
    def __init__(self, cfg: GPTConfig, scatter: bool) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.ln1, self.ln2, self.norm = (nn.LayerNorm(cfg.n_embd) for _ in range(3))
        self.attn, self.mlp = SplitKeyAttention(cfg, scatter), MLP(cfg)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        return self.wte(idx)  # type: ignore[no-any-return]

    def trunk(self, idx: torch.Tensor) -> torch.Tensor:
        """The embedding, the one block, the final norm: what a head reads."""
        x = self.embed(idx)
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return self.norm(x)  # type: ignore[no-any-return]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        return lm_output(self.head(self.trunk(idx)), targets)


def split_key_lm(scatter: bool = False):  # type: ignore[no-untyped-def]
    return _tiny_lm(SplitKeyLM, scatter)


def _split_key_variant(cfg: GPTConfig, attn: type[nn.Module] | None, mlp: type[nn.Module] | None) -> SplitKeyLM:
    """SplitKeyLM with plain attention (or ``attn``) and its MLP (or ``mlp``) swapped in, built in
    the order the fixture classes used, so the seeded weights are the same."""
    model = SplitKeyLM(cfg, scatter=False)
    model.attn = (attn or CausalSelfAttention)(cfg)  # type: ignore[assignment]
    if mlp is not None:
        model.mlp = mlp(cfg)  # type: ignore[assignment]
    return model


class ScaledTokensPlusPositionsLM(SplitKeyLM):
    """BioGPT's stream root: ``wte(idx) * sqrt(d) + wpe(positions)``, the positions broadcast
    over the batch, with no normaliser after the sum (pre-LN)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)  # type: ignore[assignment]
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device).unsqueeze(0)
        return self.wte(idx) * 4.0 + self.wpe(positions)  # type: ignore[no-any-return]


def scaled_tokens_plus_positions_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(ScaledTokensPlusPositionsLM)


class PaddedTableLM(ScaledTokensPlusPositionsLM):
    """A token table whose padding row is zero (``padding_idx``), the padding token in the
    example, no position table: the stream is exactly 0 at that token, where the GCT update's
    P_perp_h divides by ||h||^2 = 0."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd, padding_idx=0)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        return self.wte(idx)  # type: ignore[no-any-return]


def padded_table_lm():  # type: ignore[no-untyped-def]
    model, (idx, targets) = _tiny_lm(PaddedTableLM)
    idx[:, 0] = 0
    return model, (idx, targets)


class SharedExpertMLP(nn.Module):
    """Qwen2-MoE's sparse block in small: the routed experts' output plus a sigmoid-gated
    shared expert, on flattened tokens, reshaped back; the two summands carry different units."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.router = nn.Linear(cfg.n_embd, 2, bias=False)
        self.experts = nn.ModuleList([MLP(cfg), MLP(cfg)])
        self.shared_expert = MLP(cfg)
        self.shared_expert_gate = nn.Linear(cfg.n_embd, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        flat = x.view(-1, C)
        weights = torch.softmax(self.router(flat), dim=-1)
        routed = weights[:, :1] * self.experts[0](flat)
        shared = torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        return (routed + shared).reshape(B, T, C)


class SharedExpertLM(SplitKeyLM):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = SharedExpertMLP(cfg)  # type: ignore[assignment]


def shared_expert_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(SharedExpertLM)


class UpcastRMSNorm(nn.Module):
    """NanoChat's and many others' RMSNorm without a gain: computed in float32 whatever the
    input's dtype, then cast back to it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(torch.float32)
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x)


class NormedEmbeddingLM(SplitKeyLM):
    """The embedding normalised (in float32, cast back) before the first block, as NanoChat does."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)
        self.norm0 = UpcastRMSNorm()

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        return self.norm0(self.wte(idx))  # type: ignore[no-any-return]


def normed_embedding_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(NormedEmbeddingLM)


class ParamGatedAttention(CausalSelfAttention):
    """Output-gated attention (Dory, AXK2): ``y * sigmoid(g.view(B, T, C) * s^2)``, the gate a
    projection of the input scaled by a parameter, reshaped with the traced sizes."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.gate_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.s_gate = nn.Parameter(torch.ones(cfg.n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        y = super().forward(x)
        g = self.gate_proj(x).view(B * T, C).view(B, T, C)
        return y * torch.sigmoid(g * self.s_gate.square())


class BiasedSoftplusMLP(nn.Module):
    """A Mamba-style step size: ``softplus(dt + dt_bias)`` with a bias parameter added to a
    projection of the input, scaling a second projection."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.dt_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.dt_bias = nn.Parameter(torch.zeros(cfg.n_embd))
        self.up = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = torch.nn.functional.softplus(self.dt_proj(x) + self.dt_bias)
        return dt * self.up(x)


class ParamGateLM(SplitKeyLM):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = ParamGatedAttention(cfg)  # type: ignore[assignment]
        self.mlp = BiasedSoftplusMLP(cfg)  # type: ignore[assignment]


def param_gate_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(ParamGateLM)


class ExplicitMaskedAttention(nn.Module):
    """Eager attention as GPT-1, CPM-Ant and Flint write it: ``q @ k^T / sqrt(d)`` plus a
    relative position bias shared by every layer, a causal-mask buffer applied by product
    (``w * b + -1e4 * (1 - b)``), a learned sink logit per head joined before the softmax, and
    GraniteMoE-SWA's sink scaling ``sigmoid(logsumexp(w) - sink)`` of the output."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.sinks = nn.Parameter(torch.zeros(cfg.n_head))
        self.sink_bias = nn.Parameter(torch.zeros(cfg.n_head))
        self.register_buffer("b", torch.tril(torch.ones(cfg.block_size, cfg.block_size)).view(
            1, 1, cfg.block_size, cfg.block_size))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        w = torch.matmul(q, k.transpose(-1, -2)) / (C // self.n_head) ** 0.5
        w = w + bias
        b = self.b[:, :, :T, :T]
        w = w * b + -1e4 * (1 - b)
        sinks = self.sinks.view(1, -1, 1, 1).expand(B, -1, T, 1)
        lse_gate = torch.sigmoid(torch.logsumexp(w, dim=-1) - self.sink_bias.view(1, -1, 1))  # GraniteMoE-SWA
        w = torch.softmax(torch.cat([w, sinks], dim=-1), dim=-1)[..., :-1]
        y = torch.matmul(w, v) * lse_gate.unsqueeze(-1)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class ExplicitAttentionLM(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.rel = nn.Embedding(2 * cfg.block_size, cfg.n_head)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.lns = nn.ModuleList([nn.LayerNorm(cfg.n_embd) for _ in range(4)])
        self.attns = nn.ModuleList([ExplicitMaskedAttention(cfg) for _ in range(2)])
        self.mlps = nn.ModuleList([MLP(cfg) for _ in range(2)])
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.logit_scale = nn.Parameter(torch.ones(cfg.vocab_size))  # Dory's learned logit scale

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        bias = self.rel(pos[None, :] - pos[:, None] + T).permute(2, 0, 1).unsqueeze(0)
        bias = bias.expand(idx.size(0), -1, -1, -1)  # CPM-Ant's has the scores' shape
        x = self.wte(idx) + self.wpe(pos) + 0  # GPT-1: ``+ token_type_embeds``, 0 without types
        for i in range(2):
            x = x + self.attns[i](self.lns[2 * i](x), bias)
            x = x + self.mlps[i](self.lns[2 * i + 1](x))
        return lm_output(self.head(self.norm(x)) * self.logit_scale, targets)


def explicit_attention_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(ExplicitAttentionLM)


class Fp32ResidualBlock(nn.Module):
    """Mamba's block: the residual kept as ``residual.to(torch.float32)`` after the normaliser
    reads the stream, so the value added is a cast the branch is not computed from."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.mixer = MLP(cfg)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.norm(hidden_states.to(dtype=self.norm.weight.dtype))
        residual = residual.to(torch.float32)
        return residual + self.mixer(hidden_states)


class Fp32ResidualLM(nn.Module):
    """Two Mamba-style blocks; ``mixer``, when given, replaces each block's MLP (built after it,
    so the other weights draw as before)."""

    def __init__(self, cfg: GPTConfig, mixer: type[nn.Module] | None = None) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList([Fp32ResidualBlock(cfg) for _ in range(2)])
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if mixer is not None:
            for layer in self.layers:
                layer.mixer = mixer(cfg)  # type: ignore[call-arg]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        for layer in self.layers:
            x = layer(x)
        return lm_output(self.head(self.norm(x)), targets)


def fp32_residual_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(Fp32ResidualLM)


class TopkFirstMoE(nn.Module):
    """Cohere2-MoE's router: the top-k of the router logits first, the softmax over the k values
    chosen (the softmax reads a selection of the projection, not the projection)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.router = nn.Linear(cfg.n_embd, 4, bias=False)
        self.experts = nn.ModuleList([MLP(cfg) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores, chosen = torch.topk(self.router(x), 2, dim=-1)
        weights = torch.softmax(scores, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            w = (weights * (chosen == e)).sum(-1, keepdim=True)
            out = out + w * expert(x)
        return out


class TopkFirstLM(SplitKeyLM):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)  # type: ignore[assignment]
        self.mlp = TopkFirstMoE(cfg)  # type: ignore[assignment]


def topk_first_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(TopkFirstLM)


class SkipGainMixer(nn.Module):
    """Mamba's mixer in small: a gated, dimensionless-after-rewrite scan output plus the skip
    term ``u * D`` with a learned per-channel gain ``D``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.in_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.dt_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.D = nn.Parameter(torch.ones(cfg.n_embd))
        self.out_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = torch.nn.functional.silu(self.in_proj(x))
        dt = torch.sigmoid(self.dt_proj(x))
        y = torch.cumsum(dt * u, dim=1) / torch.arange(1, x.size(1) + 1, device=x.device)[None, :, None]
        return self.out_proj(y + u * self.D)


def skip_gain_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(Fp32ResidualLM, SkipGainMixer)


class StackedHeadsLM(SplitKeyLM):
    """CSM's depth decoder: one head per position (codebook), ``stack([linear(h[:, i], W[i].T)
    for i])``, the logits not one linear projection of the stream."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)  # type: ignore[assignment]
        self.heads = nn.Parameter(torch.randn(3, cfg.n_embd, cfg.vocab_size) * 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        h = self.trunk(idx)
        logits = torch.stack([torch.nn.functional.linear(h[:, i, :], self.heads[i].T) for i in range(3)], dim=1)
        return lm_output(logits, targets[:, :3])


def stacked_heads_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(StackedHeadsLM)


class CodebookLossesLM(StackedHeadsLM):
    """MusicGen's tables, heads and loss: one embedding table per codebook, summed; one
    ``nn.Linear`` head per codebook stacked (parts with different units: a UC101 on the stack
    too); one cross-entropy per codebook, each reading its slice of the stack (a UC301 per
    codebook, on the same heads)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.lm_heads = nn.ModuleList(nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False) for _ in range(3))
        self.tables = nn.ModuleList(nn.Embedding(cfg.vocab_size, cfg.n_embd) for _ in range(4))

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        return sum(table(idx) for table in self.tables)  # type: ignore[return-value]  # one table per codebook

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        h = self.trunk(idx)
        logits = torch.stack([head(h) for head in self.lm_heads], dim=1)
        return sum(torch.nn.functional.cross_entropy(logits[:, i].contiguous().view(-1, logits.shape[-1]),
                                                     targets.reshape(-1)) for i in range(3))


def codebook_losses_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(CodebookLossesLM)


class ScaledResidualBlock(nn.Module):
    """MiniMax's block: ``residual * alpha + branch * beta`` with constant factors, the stream
    normalised before it is kept (post-norm)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.input_layernorm, self.post_layernorm = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn, self.mlp = CausalSelfAttention(cfg), MLP(cfg)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.input_layernorm(h)
        h = h * 1.5 + self.attn(h) * 0.5
        h = self.post_layernorm(h)
        return h * 1.5 + self.mlp(h) * 0.5


class ScaledResidualLM(Fp32ResidualLM):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.layers = nn.ModuleList([ScaledResidualBlock(cfg) for _ in range(2)])


def scaled_residual_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(ScaledResidualLM)


class ResidualGate(nn.Module):
    """Ergo's residual gate: the branch and the stream each scaled by a function of one learned
    weight per channel, ``sigmoid(w) * branch + sqrt(1 + sigmoid(w)) * exp(-softplus(w) / 2) * stream``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(width))

    def forward(self, branch: torch.Tensor, stream: torch.Tensor) -> torch.Tensor:
        gate = self.weight.sigmoid()
        kept = torch.sqrt(1.0 + gate) * torch.exp(-0.5 * torch.nn.functional.softplus(self.weight))
        return gate * branch + kept * stream


class GatedResidualBlock(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn, self.mlp = CausalSelfAttention(cfg), MLP(cfg)
        self.attn_gate, self.mlp_gate = ResidualGate(cfg.n_embd), ResidualGate(cfg.n_embd)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.attn_gate(self.attn(self.ln_1(h)), h)
        return self.mlp_gate(self.mlp(self.ln_2(h)), h)


class GatedResidualLM(Fp32ResidualLM):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.layers = nn.ModuleList([GatedResidualBlock(cfg) for _ in range(2)])


def gated_residual_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(GatedResidualLM)


class PolyActivation(nn.Module):
    """Apertus's xIELU in small: ``a_p x^2 + b x`` above 0, ``(expm1(min(x, eps)) - x) a_n + b x``
    below, the gains softplus'd parameters: a square beside x (UC101) and an exponential (UC204),
    no UC202 op."""

    def __init__(self) -> None:
        super().__init__()
        self.alpha_p = nn.Parameter(torch.tensor([0.5]))
        self.alpha_n = nn.Parameter(torch.tensor([0.3]))
        self.register_buffer("beta", torch.tensor(0.5))
        self.register_buffer("eps", torch.tensor(-1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a_p = nn.functional.softplus(self.alpha_p)
        a_n = self.beta + nn.functional.softplus(self.alpha_n)
        return torch.where(x > 0, a_p * x * x + self.beta * x,
                           (torch.expm1(torch.min(x, self.eps)) - x) * a_n + self.beta * x)


class ClampedGluMLP(nn.Module):
    """GPT-OSS's expert in small: gate and up interleaved in one projection, each clamped to a
    literal limit, ``(up + 1) * gate * sigmoid(1.702 gate)`` (UC103 at the clamps and the +1),
    then an xIELU-style second path through ``act``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.n_embd, 2 * cfg.n_embd)
        self.down = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.act = PolyActivation()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gu = self.gate_up(x)
        gate, up = gu[..., ::2].clamp(max=7.0), gu[..., 1::2].clamp(min=-7.0, max=7.0)
        glu = gate * torch.sigmoid(gate * 1.702)
        return self.down((up + 1) * glu) + self.act(self.proj(x))  # type: ignore[no-any-return]



def clamped_glu_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, None, ClampedGluMLP)


class ScatteredTopkMoE(nn.Module):
    """Llama 4's router: the top-k router logits placed back into a ``-inf`` fill, transposed
    to experts x tokens, through a sigmoid; each expert reads its row of gates."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.router = nn.Linear(cfg.n_embd, 4, bias=False)
        self.experts = nn.ModuleList([MLP(cfg) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.size(-1))
        logits = self.router(flat)
        top, idx = torch.topk(logits, 2, dim=1)
        scores = torch.full_like(logits, float("-inf")).scatter_(1, idx, top).transpose(0, 1)
        gates = torch.sigmoid(scores.float()).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            out = out + gates[e].unsqueeze(-1) * expert(flat)
        return out.view_as(x)



def scattered_topk_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, None, ScatteredTopkMoE)


class PrescaledQueryAttention(nn.Module):
    """XGLM's eager attention: the query scaled by ``d^-0.5`` before the heads are split,
    ``bmm`` of (B*H, T, d) operands, a mask added, then ``torch.max(w, finfo.min)``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.d = cfg.n_head, cfg.n_embd // cfg.n_head
        self.q, self.k, self.v = (nn.Linear(cfg.n_embd, cfg.n_embd) for _ in range(3))
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        heads = (B * self.n_head, T, self.d)
        q = (self.q(x) * self.d**-0.5).view(B, T, self.n_head, self.d).transpose(1, 2).reshape(heads)
        k, v = (p(x).view(B, T, self.n_head, self.d).transpose(1, 2).reshape(heads) for p in (self.k, self.v))
        mask = torch.full((T, T), torch.finfo(x.dtype).min, dtype=x.dtype).triu(1)
        w = torch.bmm(q, k.transpose(1, 2)).view(B, self.n_head, T, T) + mask
        w = torch.max(w, torch.full((), torch.finfo(w.dtype).min)).view(heads[0], T, T)
        y = torch.bmm(torch.softmax(w, dim=-1), v).view(B, self.n_head, T, self.d)
        return self.out(y.transpose(1, 2).reshape(B, T, C))  # type: ignore[no-any-return]



def prescaled_query_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, PrescaledQueryAttention, None)


class QueryPositionAttention(nn.Module):
    """SAM's (GOT-OCR2's vision tower) decomposed relative positions: the tokens on a 2 x T/2 grid,
    the scaled scores plus the raw query contracted with a learned table of relative offsets per
    grid axis, the two broadcast over each other (``rel_h[..., None] + rel_w[..., None, :]``)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.d = cfg.n_head, cfg.n_embd // cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.rel_pos_h = nn.Parameter(torch.randn(3, self.d) * 0.02)
        self.rel_pos_w = nn.Parameter(torch.randn(cfg.block_size - 1, self.d) * 0.02)
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd)

    @staticmethod
    def _table(rel_pos: torch.Tensor, size: int) -> torch.Tensor:
        offsets = torch.arange(size)[:, None] - torch.arange(size)[None, :] + (size - 1)
        return rel_pos[offsets]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        H, W = 2, T // 2
        q, k, v = (t.view(B, T, self.n_head, self.d).transpose(1, 2).reshape(B * self.n_head, T, self.d)
                   for t in self.qkv(x).split(C, dim=2))
        w = (q * self.d**-0.5) @ k.transpose(-2, -1)
        grid = q.reshape(B * self.n_head, H, W, self.d)
        rel = torch.einsum("bhwc,hkc->bhwk", grid, self._table(self.rel_pos_h, H))[:, :, :, :, None]
        if self.columns:
            rel = rel + torch.einsum("bhwc,wkc->bhwk", grid, self._table(self.rel_pos_w, W))[:, :, :, None, :]
        else:
            rel = rel.expand(-1, -1, -1, -1, W)
        w = w + rel.reshape_as(w)
        y = torch.softmax(w, dim=-1) @ v
        return self.out(y.view(B, self.n_head, T, self.d).transpose(1, 2).reshape(B, T, C))  # type: ignore[no-any-return]

    columns = True


def query_position_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, QueryPositionAttention, None)


class QueryRowPositionAttention(QueryPositionAttention):
    """QueryPositionAttention with the row offsets only: one ``einsum`` of the query with a
    table added to the scores, beside the q . k^T product."""

    columns = False


def query_row_position_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, QueryRowPositionAttention, None)


class ThresholdRouterMoE(nn.Module):
    """PhiMoE's sparsemixer in eval form: router logits below a relative threshold of the top
    one are filled with ``-inf``, then softmaxed; the same logits with the top one scattered to
    ``-inf``, softmaxed again (the runner-up's gate)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.router = nn.Linear(cfg.n_embd, 4, bias=False)
        self.experts = nn.ModuleList([MLP(cfg) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.router(x)
        with torch.no_grad():
            top, first = scores.max(dim=-1, keepdim=True)
            below = ((top - scores) / scores.abs().clamp(min=top)) > 0.02
        gates = torch.softmax(scores.masked_fill(below, float("-inf")), dim=-1)
        second = torch.softmax(scores.scatter(-1, first, float("-inf")), dim=-1)  # the runner-up's gate
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out = out + (gates[..., e : e + 1] + second[..., e : e + 1]) * expert(x)
        return out



def threshold_router_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, None, ThresholdRouterMoE)


class MediaTokensLM(SplitKeyLM):
    """A LLaVA-style join: projected media features (a linear and a LayerNorm) placed into the
    token embeddings at the media token (id 1) by ``masked_scatter``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)
        self.projector = nn.Sequential(nn.Linear(6, cfg.n_embd), nn.LayerNorm(cfg.n_embd))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor, media: torch.Tensor):  # type: ignore[no-untyped-def]
        embeds = self.wte(idx)
        mask = (idx == 1).unsqueeze(-1).expand_as(embeds)
        x = embeds.masked_scatter(mask, self.projector(media).to(embeds.dtype))
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return lm_output(self.head(self.norm(x)), targets)


def media_tokens_lm():  # type: ignore[no-untyped-def]
    model, (idx, targets) = _tiny_lm(MediaTokensLM)
    idx[idx == 1] = 2
    idx[:, 2] = 1  # one media token per row
    return model, (idx, targets, torch.randn(2, 6))


class GatedSkipLM(SplitKeyLM):
    """Residual adds whose skip side carries parameters: Doge's ``input_residual * h +
    attn(h)``, Zaya's ``(h + b) * s + (mlp(h) + b') * s'``; and Doge's dynamic gate
    ``exp(A * softplus(dt_proj(h)))`` scaling the attention branch."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)
        d = cfg.n_embd
        self.input_residual = nn.Parameter(torch.ones(d))
        self.skip_bias, self.skip_scale = nn.Parameter(torch.zeros(d)), nn.Parameter(torch.ones(d))
        self.branch_bias, self.branch_scale = nn.Parameter(torch.zeros(d)), nn.Parameter(torch.ones(d))
        self.dt_proj = nn.Linear(d, d)
        self.A = nn.Parameter(torch.full((d,), -0.5))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        h = self.ln1(x)
        gate = torch.exp(self.A * nn.functional.softplus(self.dt_proj(h)))
        x = self.input_residual * x + self.attn(h) * gate
        x = (x + self.skip_bias) * self.skip_scale + (self.mlp(self.ln2(x)) + self.branch_bias) * self.branch_scale
        return lm_output(self.head(self.norm(x)), targets)


def gated_skip_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(GatedSkipLM)


class DifferentialAttention(CausalSelfAttention):
    """DiffLlama's lambda: ``exp(sum(lq1 * lk1)) - exp(sum(lq2 * lk2)) + lambda_init``, a value
    of parameters alone (UC204 at each exp), scaling one attention map's output against another's."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        d = cfg.n_embd // cfg.n_head
        self.lq1, self.lk1, self.lq2, self.lk2 = (nn.Parameter(0.1 * torch.randn(d)) for _ in range(4))
        self.second = CausalSelfAttention(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lam = torch.exp(torch.sum(self.lq1 * self.lk1)) - torch.exp(torch.sum(self.lq2 * self.lk2)) + 0.8
        return super().forward(x) - lam * self.second(x)  # type: ignore[no-any-return]



def differential_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, DifferentialAttention, None)


class LinearScan(nn.Module):
    """RecurrentGemma's RG-LRU scan in small: ``h = a_t * h + x_t`` step by step, each state
    written into a zero-filled output (``out[:, t] = h``), whose steps have different units."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.x_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.a_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.out_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u, a = self.x_proj(x), torch.sigmoid(self.a_proj(x))
        h = torch.zeros_like(u[:, 0])
        out = torch.zeros_like(u)
        for t in range(u.shape[1]):
            h = a[:, t] * h + u[:, t]
            out[:, t] = h
        return self.out_proj(out)


def linear_scan_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(Fp32ResidualLM, LinearScan)


class DeltaRuleSubstitution(nn.Module):
    """A chunked delta rule's forward substitution in small (Kimi-Linear, Bailing-hybrid): the
    decayed key products ``A = -(k k^T) * exp(-softplus(a(x)))`` solved row by row in place,
    ``A[i, :i] += (A[i, :, None] * A[:, :i]).sum(-2)``, slices of different units written into a
    value that is not a fresh tensor while the decay's argument has a unit."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.k_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.v_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.a_proj = nn.Linear(cfg.n_embd, 1, bias=False)
        self.out_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = nn.functional.normalize(self.k_proj(x), dim=-1)
        decay = torch.exp(-nn.functional.softplus(self.a_proj(x)))
        a = (-(k @ k.transpose(-2, -1)) * decay).tril(-1)
        for i in range(1, a.shape[-1]):
            row, sub = a[..., i, :i].clone(), a[..., :i, :i].clone()
            a[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
        return self.out_proj(a @ self.v_proj(x))


def delta_rule_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(Fp32ResidualLM, DeltaRuleSubstitution)


class MixedGateHead(nn.Module):
    """HY-V4's final hyper-connection head in small: the gate's argument is two input-dependent
    values combined inline, ``sigmoid(linear(x) * rms(x) * s + b)``, which weighs the stream."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fn = nn.Parameter(torch.randn(cfg.n_embd, cfg.n_embd) / cfg.n_embd**0.5)
        self.scale = nn.Parameter(torch.ones(1))
        self.base = nn.Parameter(torch.zeros(cfg.n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = x.pow(2).mean(-1, keepdim=True).add(1e-6).rsqrt()
        mixes = torch.nn.functional.linear(x, self.fn) * rms
        return torch.sigmoid(mixes * self.scale + self.base) * x


class MixedGateLM(Fp32ResidualLM):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.gate = MixedGateHead(cfg)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        for layer in self.layers:
            x = layer(x)
        return lm_output(self.head(self.norm(self.gate(x))), targets)


def mixed_gate_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(MixedGateLM)


class SizedByItsPart(nn.Module):
    """DeepSeek-V4's attention in small: a submodule gives a length computed from the input's
    (``T // 4``) and the block adds it to ``T``: under symbolic sizes, an add of two sizes."""

    class Compressor(nn.Module):
        def forward(self, x: torch.Tensor) -> int:
            return x.shape[1] // 4  # type: ignore[no-any-return]

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.compressor = SizedByItsPart.Compressor()
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1] + self.compressor(x)
        pad = x.new_zeros(x.shape[0], n - x.shape[1], x.shape[2])
        return self.proj(torch.cat([x, pad], dim=1)[:, : x.shape[1]])


def sized_by_its_part_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(Fp32ResidualLM, SizedByItsPart)


class LinearAttention(nn.Module):
    """Causal linear attention without a softmax (as delta-rule and gated linear attention
    layers are): ``q_t . sum_{s<=t} k_s v_s^T``, feature maps elu + 1."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.o_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k = nn.functional.elu(q) + 1, nn.functional.elu(k) + 1
        state = torch.cumsum(k.unsqueeze(-1) * v.unsqueeze(-2), dim=1)  # (B, T, C, C)
        return self.o_proj(torch.einsum("btc,btcd->btd", q, state) / x.shape[-1])  # type: ignore[no-any-return]


class ScanMixer(nn.Module):
    """A state-space style mixer: a gated causal running mean of a projection."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.in_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.out_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.in_proj(x)
        steps = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)[None, :, None]
        return self.out_proj(torch.sigmoid(u) * torch.cumsum(u, dim=1) / steps)  # type: ignore[no-any-return]


class MixerBlock(nn.Module):
    """Llama's naming: the MLP's normaliser is ``post_attention_layernorm``."""

    def __init__(self, cfg: GPTConfig, mixer: str) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.n_embd)
        self.post_attention_layernorm = nn.LayerNorm(cfg.n_embd)
        if mixer == "self_attn":
            self.self_attn = LinearAttention(cfg)
        else:
            self.mixer = ScanMixer(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mix = self.self_attn if hasattr(self, "self_attn") else self.mixer
        x = x + mix(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))  # type: ignore[no-any-return]


class MixerLM(nn.Module):
    def __init__(self, cfg: GPTConfig, mixer: str) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.layers = nn.ModuleList([MixerBlock(cfg, mixer)])
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        for block in self.layers:
            x = block(x)
        return lm_output(self.head(self.norm(x)), targets)


def mixer_lm(mixer: str):  # type: ignore[no-untyped-def]
    return _tiny_lm(MixerLM, mixer)


class PenaltyLM(SplitKeyLM):
    """A loss plus a weight penalty in the weights' units (UC303): nothing the rewrite's rules
    touch, so every rule does its part and the result still lints dirty."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)  # type: ignore[assignment]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        logits, loss = lm_output(self.head(self.trunk(idx)), targets)
        return logits, loss + self.wte.weight.pow(2).sum()


def penalty_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(PenaltyLM)


class AddsItsQuery(nn.Module):
    """BLT's cross attention: its output already holds its query (``attn + q``)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return self.proj(self.norm(q)) + q


class ResidualTwiceLM(WrapperLM):
    """The caller adds the query again: ``h + (attn(h) + h)``, two residual adds, one inside the
    other's branch."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg)
        self.cross = AddsItsQuery(cfg)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x = self.wte(idx)
        for norm, block, residual in self.layers:  # type: ignore[misc]
            x = residual(block(norm(x)), x)
        x = x + self.cross(x)
        return lm_output(self.head(self.norm(x)), targets)


def residual_twice_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(ResidualTwiceLM)


class SegmentSumDecay(nn.Module):
    """Mamba2's chunked scan in small: the decay between positions is ``exp(segsum(A dt))``, a
    cumulative sum masked to -inf above the diagonal (``masked_fill(~tril, -inf)``) before the
    exp, whose argument has the unit of the projection ``dt`` comes from."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.dt_proj = nn.Linear(cfg.n_embd, 1, bias=False)
        self.v_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.out_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = -self.dt_proj(x).squeeze(-1).abs()  # (B, T)
        T = a.shape[-1]
        seg = a[..., :, None].expand(*a.shape, T).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(-1), 0)
        seg = seg.cumsum(-2).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -torch.inf)
        return self.out_proj(torch.exp(seg) @ self.v_proj(x))


def segment_sum_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(Fp32ResidualLM, SegmentSumDecay)


class StreamBiasAttention(nn.Module):
    """Inkling's relative position bias: the stream projected per head (``r_proj``) and mixed by
    a learned bank of bias-versus-distance profiles, gathered per (query, key) distance and
    passed to SDPA as an additive float mask under the causal one."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.d, self.d_rel, self.extent = cfg.n_head, cfg.n_embd // cfg.n_head, 4, 6
        self.q, self.k, self.v, self.out = (nn.Linear(cfg.n_embd, cfg.n_embd, bias=False) for _ in range(4))
        self.r_proj = nn.Linear(cfg.n_embd, cfg.n_head * self.d_rel, bias=False)
        self.proj = nn.Parameter(torch.randn(self.d_rel, self.extent))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = (p(x).view(B, T, self.n_head, self.d).transpose(1, 2) for p in (self.q, self.k, self.v))
        rel = (self.r_proj(x).view(B, T, self.n_head, self.d_rel) @ self.proj).transpose(1, 2)
        pos = torch.arange(T)
        distance = (pos[:, None] - pos[None, :])[None, None]
        bias = rel.gather(-1, distance.clamp(0, self.extent - 1).expand(B, self.n_head, T, T))
        bias = bias.masked_fill((distance < 0) | (distance >= self.extent), 0.0)
        mask = torch.where(distance >= 0, bias, torch.finfo(x.dtype).min)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(B, T, C))  # type: ignore[no-any-return]


def stream_bias_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, StreamBiasAttention, None)



class EntropyHeadLM(SplitKeyLM):
    """BLT's patcher: a second head on the stream whose logits only feed a categorical's entropy
    (``Categorical(logits=...)`` normalises them by their own logsumexp before its softmax)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.aux = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        h = self.trunk(idx)
        logits, loss = lm_output(self.head(h), targets)
        entropy = torch.distributions.Categorical(logits=self.aux(h), validate_args=False).entropy()
        return logits, loss + 0.01 * entropy.mean()


def entropy_head_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(EntropyHeadLM)


class LogNormalisedGateMLP(nn.Module):
    """Inkling's router: per-expert log-sigmoid scores normalised by their own logsumexp
    (``exp(s - logsumexp(s))``), weighting two experts."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.n_embd, 2, bias=False)
        self.experts = nn.ModuleList(MLP(cfg) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.nn.functional.logsigmoid(self.gate(x))
        w = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
        return sum(w[..., i : i + 1] * e(x) for i, e in enumerate(self.experts))  # type: ignore[return-value]


def log_normalised_gate_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, None, LogNormalisedGateMLP)


class GatedExpert(nn.Module):
    """One expert of a research-code MoE: a gated MLP whose activation is a module."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.w1, self.v1 = (nn.Linear(cfg.n_embd, 2 * cfg.n_embd, bias=False) for _ in range(2))
        self.w2 = nn.Linear(2 * cfg.n_embd, cfg.n_embd, bias=False)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.act(self.w1(x)) * self.v1(x))  # type: ignore[no-any-return]


class LoopedExpertsMoE(nn.Module):
    """DBRX's and most research code's MoE: a loop over the experts the batch hit, each reading
    its tokens by ``torch.where`` and adding into a zero fill. The loop branches on data, so a
    capture keeps this module whole."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.router = nn.Linear(cfg.n_embd, 4, bias=False)
        self.experts = nn.ModuleList([GatedExpert(cfg) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.size(-1))
        weights, chosen = torch.topk(torch.softmax(self.router(flat), dim=-1), 2, dim=-1)
        out = torch.zeros_like(flat)
        for e in torch.unique(chosen).tolist():
            rows, slot = torch.where(chosen == e)
            out.index_add_(0, rows, self.experts[e](flat[rows]) * weights[rows, slot, None])
        return out.view_as(x)


def looped_experts_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, None, LoopedExpertsMoE)


class LearnedPositionsLM(SplitKeyLM):
    """ViT's and much research code's positions: a parameter table sliced to the sequence and
    added to the token embedding, the first block reading the sum."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)  # type: ignore[assignment]
        self.pos = nn.Parameter(0.02 * torch.randn(1, cfg.block_size, cfg.n_embd))

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        return self.wte(idx) + self.pos[:, : idx.size(1)]  # type: ignore[no-any-return]


def learned_positions_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(LearnedPositionsLM)


class AutocastLM(SplitKeyLM):
    """A forward that opens its own ``torch.autocast`` region (bfloat16 on CPU): the stream stays
    float32, each linear and attention computes in bfloat16."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.attn = CausalSelfAttention(cfg)  # type: ignore[assignment]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = self.head(self.trunk(idx))
        return lm_output(logits.float(), targets)


def autocast_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(AutocastLM)


class EinsumAttention(nn.Module):
    """T5-style attention as research code writes it: ``einsum`` scores of (B, T, H, d) heads, a
    learned bias per head and relative offset (an embedding of bucketed distances) added, a
    causal ``masked_fill``, and ``einsum`` again for the values."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.d = cfg.n_head, cfg.n_embd // cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.rel = nn.Embedding(cfg.block_size, cfg.n_head)
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.d).unbind(2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k)
        pos = torch.arange(T)
        scores = scores + self.rel((pos[:, None] - pos[None, :]).clamp(min=0)).permute(2, 0, 1)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)
        return self.out(y.reshape(B, T, C))  # type: ignore[no-any-return]


def einsum_attention_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, EinsumAttention, None)


class MatmulHeadLM(SplitKeyLM):
    """A tied head written as a product with the embedding table (``h @ wte.weight.t()``) and a
    ``d^-0.5`` scale, as T5 and many hand-written models compute their logits."""

    def __init__(self, cfg: GPTConfig, einsum: bool) -> None:
        super().__init__(cfg, scatter=False)
        self.einsum = einsum

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        h = self.trunk(idx)
        scores = torch.einsum("btd,vd->btv", h, self.wte.weight) if self.einsum else h @ self.wte.weight.t()
        return lm_output(scores * h.size(-1) ** -0.5, targets)


def matmul_head_lm(einsum: bool = False):  # type: ignore[no-untyped-def]
    return _tiny_lm(MatmulHeadLM, einsum)


class Seq2SeqLM(nn.Module):
    """``nn.Transformer`` as translation code uses it: post-norm layers, each stack with a final
    norm of its own, the decoder's cross-attention reading the encoder's normed output."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.tr = nn.Transformer(cfg.n_embd, cfg.n_head, 1, 1, 2 * cfg.n_embd, dropout=0.0, batch_first=True)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor):  # type: ignore[no-untyped-def]
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1) - 1)
        out = self.tr(self.emb(src), self.emb(tgt[:, :-1]), tgt_mask=mask, tgt_is_causal=True)
        return torch.nn.functional.cross_entropy(self.head(out).flatten(0, 1), tgt[:, 1:].flatten())


def seq2seq_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(Seq2SeqLM)


class RelBiasBlock(nn.Module):
    """T5's attention in small: SDPA with an additive bias of learned relative-position logits,
    computed by the first block from its table and handed on to the next (shared), a causal mask
    folded into it."""

    def __init__(self, cfg: GPTConfig, has_table: bool) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1, self.ln2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.o = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.table = nn.Embedding(2 * cfg.block_size - 1, cfg.n_head) if has_table else None
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, C = x.shape
        if bias is None:
            assert self.table is not None
            pos = torch.arange(T)
            rel = self.table(pos[None, :] - pos[:, None] + self.table.num_embeddings // 2).permute(2, 0, 1)[None]
            bias = rel.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x)), bias


class RelBiasLM(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList([RelBiasBlock(cfg, i == 0) for i in range(2)])
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        x, bias = self.wte(idx), None
        for block in self.blocks:
            x, bias = block(x, bias)
        return lm_output(self.head(self.norm(x)), targets)


def rel_bias_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(RelBiasLM)


class BiasedHeadLM(SplitKeyLM):
    """BART's head: the projection plus a buffer of per-token logit biases
    (``final_logits_bias``)."""

    final_logits_bias: torch.Tensor

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.register_buffer("final_logits_bias", torch.zeros(1, cfg.vocab_size))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        return lm_output(self.head(self.trunk(idx)) + self.final_logits_bias, targets)


def biased_head_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(BiasedHeadLM)


class ConvMixer(nn.Module):
    """Mamba's mixer in small: features moved to axis 1 for a causal depthwise convolution over
    time, a gate, a skip term inside the mixer, then moved back (C over the last axis there is
    C over time: it leaks later tokens into earlier ones)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        d = cfg.n_embd
        self.in_proj = nn.Linear(d, 2 * d, bias=False)
        self.conv1d = nn.Conv1d(d, d, 4, groups=d, padding=3)
        self.D = nn.Parameter(torch.ones(d))
        self.out_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u, gate = self.in_proj(x).transpose(1, 2).chunk(2, dim=1)
        u = torch.nn.functional.silu(self.conv1d(u)[..., : x.size(1)])
        y = torch.cumsum(u, dim=2) * torch.nn.functional.silu(gate)
        y = y + u * self.D[None, :, None]
        return self.out_proj(y.transpose(1, 2))  # type: ignore[no-any-return]


def conv_mixer_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(Fp32ResidualLM, ConvMixer)


class ConvResidual(nn.Module):
    """A residual conv net whose stream is an (N, C, H, W) feature map: a classifier, or with
    ``dense`` a per-pixel output (a denoiser's features), whose positions say what each output
    reads."""

    def __init__(self, dense: bool = False) -> None:
        super().__init__()
        self.dense = dense
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        # a dense net normalises per pixel (batch norm, in eval mode): GroupNorm reads the whole map
        self.blocks = nn.ModuleList([nn.Sequential(nn.BatchNorm2d(8) if dense else nn.GroupNorm(2, 8), nn.SiLU(),
                                                   nn.Conv2d(8, 8, 3, padding=1)) for _ in range(2)])
        self.head = nn.Conv2d(8, 3, 1) if dense else nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.blocks:
            h = h + block(h)
        if self.dense:
            return self.head(h)  # type: ignore[no-any-return]
        return torch.nn.functional.cross_entropy(self.head(h.mean((2, 3))), y)


def conv_residual(dense: bool = False):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 16)
    return ConvResidual(dense), (x, torch.tensor([0, 3]))


class UpsampleSkip(ConvResidual):
    """A super-resolution net: its output is a pixel-shuffled head over the stream plus the
    input upsampled (``up(h) + interpolate(x)``), a term in the image's own unit."""

    def __init__(self) -> None:
        super().__init__(dense=True)
        self.head = nn.Sequential(nn.Conv2d(8, 3 * 4, 3, padding=1), nn.PixelShuffle(2))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h) + torch.nn.functional.interpolate(x, scale_factor=2.0, mode="bilinear")  # type: ignore[no-any-return]


def upsample_skip():  # type: ignore[no-untyped-def]
    model, inputs = conv_residual(dense=True)
    torch.manual_seed(0)
    return UpsampleSkip(), inputs


class TimeBlock(nn.Module):
    """A diffusion UNet's residual block: the time embedding, through each block's own SiLU and
    projection, is added to the feature map broadcast over its pixels."""

    def __init__(self, cin: int, cout: int, tdim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)  # per pixel: outputs stay local
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.conv1(torch.nn.functional.silu(self.norm1(x)))
        h = h + self.temb(torch.nn.functional.silu(t))[:, :, None, None]
        return self.skip(x) + self.conv2(torch.nn.functional.silu(self.norm2(h)))  # type: ignore[no-any-return]


class TinyUNet(nn.Module):
    """Down, a stride-2 convolution, up by interpolation, the skip concatenated on the channels;
    with ``noise`` given, the denoising loss ``mse_loss(eps_pred, noise)``."""

    def __init__(self, c: int = 8, tdim: int = 16) -> None:
        super().__init__()
        self.tdim = tdim
        self.tmlp = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inc = nn.Conv2d(3, c, 3, padding=1)
        self.down = TimeBlock(c, c, tdim)
        self.ds = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.mid = TimeBlock(c, 2 * c, tdim)
        self.up = TimeBlock(3 * c, c, tdim)
        self.outc = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        half = self.tdim // 2
        freqs = torch.exp(-9.2 * torch.arange(half, dtype=x.dtype, device=x.device) / half)
        angles = t[:, None].to(x.dtype) * freqs[None]
        temb = self.tmlp(torch.cat([angles.cos(), angles.sin()], dim=-1))
        h1 = self.down(self.inc(x), temb)
        h2 = self.mid(self.ds(h1), temb)
        u = torch.nn.functional.interpolate(h2, scale_factor=2.0, mode="nearest")
        out = self.outc(self.up(torch.cat([u, h1], dim=1), temb))
        return out if noise is None else torch.nn.functional.mse_loss(out, noise)


def tiny_unet(loss: bool = False):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x, t = torch.randn(2, 3, 16, 16), torch.tensor([10, 500])
    return TinyUNet(), (x, t, torch.randn(2, 3, 16, 16)) if loss else (x, t)


class AdaLNBlock(nn.Module):
    """DiT's block: adaLN-Zero modulation from the conditioning vector (shift, scale and gate for
    each branch from one ``Linear(SiLU(c))``), gates on the residual branches."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        return self.proj(torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d))  # type: ignore[no-any-return]

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN_modulation(c).unsqueeze(1).chunk(6, dim=2)
        x = x + gate1 * self.attn(self.norm1(x) * (1 + scale1) + shift1)
        return x + gate2 * self.mlp(self.norm2(x) * (1 + scale2) + shift2)  # type: ignore[no-any-return]


class TinyDiT(nn.Module):
    """A diffusion transformer: patches of the noisy image, a timestep and a class embedding
    summed into the conditioning vector every block (and the final layer) reads through its own
    SiLU, the patches unpatchified, and the denoising loss against the noise."""

    def __init__(self, d: int = 16, p: int = 4, classes: int = 10, depth: int = 2) -> None:
        super().__init__()
        self.p = p
        self.x_embedder = nn.Conv2d(3, d, p, stride=p)
        self.t_embedder = nn.Sequential(nn.Linear(16, d), nn.SiLU(), nn.Linear(d, d))
        self.y_embedder = nn.Embedding(classes, d)
        self.blocks = nn.ModuleList([AdaLNBlock(d, 2) for _ in range(depth)])
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.final_linear = nn.Linear(d, p * p * 3)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        b, _, height, width = x.shape
        angles = t[:, None].to(x.dtype) * torch.exp(-9.2 * torch.arange(8, dtype=x.dtype) / 8)[None]
        c = self.t_embedder(torch.cat([angles.cos(), angles.sin()], dim=-1)) + self.y_embedder(y)
        h = self.x_embedder(x).flatten(2).transpose(1, 2)
        for block in self.blocks:
            h = block(h, c)
        shift, scale = self.final_modulation(c).unsqueeze(1).chunk(2, dim=2)
        out = self.final_linear(self.final_norm(h) * (1 + scale) + shift)
        g, p = height // self.p, self.p
        out = torch.einsum("nhwpqc->nchpwq", out.reshape(b, g, g, p, p, 3)).reshape(b, 3, height, width)
        return torch.nn.functional.mse_loss(out, noise)


def tiny_dit():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    return TinyDiT(), (x, torch.tensor([10, 500]), torch.tensor([1, 7]), torch.randn(2, 3, 8, 8))


class HyperConnection(nn.Module):
    """DeepSeek-V4's hyper-connection (mHC) in small: from the stream's copies, RMS-normalised
    together, one projection gives the weights that collapse the copies into the block's input
    (pre), spread its output over them (post) and mix them (comb, balanced by Sinkhorn steps),
    each part shifted and scaled by parameters."""

    def __init__(self, width: int, copies: int) -> None:
        super().__init__()
        self.copies = n = copies
        self.fn = nn.Parameter(torch.randn((2 + n) * n, n * width) / (n * width) ** 0.5)
        self.base = nn.Parameter(torch.zeros((2 + n) * n))
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, hs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = self.copies
        flat = torch.nn.functional.rms_norm(hs.flatten(2), (hs.shape[2] * hs.shape[3],))
        pre_w, post_w, comb_w = torch.nn.functional.linear(flat, self.fn).split([n, n, n * n], dim=-1)
        pre_b, post_b, comb_b = self.base.split([n, n, n * n])
        pre_s, post_s, comb_s = self.scale.unbind(0)
        pre = torch.sigmoid(pre_w * pre_s + pre_b)
        post = 2 * torch.sigmoid(post_w * post_s + post_b)
        comb = torch.softmax(comb_w.view(*comb_w.shape[:-1], n, n) * comb_s + comb_b.view(n, n), dim=-1)
        for _ in range(2):
            comb = comb / (comb.sum(dim=-2, keepdim=True) + 1e-6)
            comb = comb / (comb.sum(dim=-1, keepdim=True) + 1e-6)
        return post, comb, (pre.unsqueeze(-1) * hs).sum(dim=2)


class HyperBlock(nn.Module):
    """A block on a stream of ``copies`` copies: ``post * attn(x) + comb^T @ copies``, with no
    add that takes the stream itself."""

    def __init__(self, cfg: GPTConfig, copies: int) -> None:
        super().__init__()
        self.attn_hc, self.mlp_hc = HyperConnection(cfg.n_embd, copies), HyperConnection(cfg.n_embd, copies)
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn, self.mlp = CausalSelfAttention(cfg), MLP(cfg)

    def forward(self, hs: torch.Tensor) -> torch.Tensor:
        post, comb, x = self.attn_hc(hs)
        hs = post.unsqueeze(-1) * self.attn(self.ln_1(x)).unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), hs)
        post, comb, x = self.mlp_hc(hs)
        return post.unsqueeze(-1) * self.mlp(self.ln_2(x)).unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), hs)


class HyperConnectionLM(nn.Module):
    def __init__(self, cfg: GPTConfig, copies: int = 3) -> None:
        super().__init__()
        self.copies = copies
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.blocks = nn.ModuleList([HyperBlock(cfg, copies) for _ in range(2)])
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):  # type: ignore[no-untyped-def]
        hs = self.wte(idx).unsqueeze(2).expand(-1, -1, self.copies, -1).contiguous()
        for block in self.blocks:
            hs = block(hs)
        return lm_output(self.head(self.norm(hs.mean(2))), targets)


def hyper_connection_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(HyperConnectionLM)


class WindowPool(nn.Module):
    """DeepSeek-V4's compressor in small: each window of ``r`` positions pooled with softmax
    weights over it and the window before, the two windows' gates laid side by side in a
    buffer filled with -inf (the first window has none before it), then spread back."""

    def __init__(self, cfg: GPTConfig, r: int = 2) -> None:
        super().__init__()
        self.r = r
        self.kv = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.gate = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.position_bias = nn.Parameter(torch.zeros(r, cfg.n_embd))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, T, C = h.shape
        r, w = self.r, T // self.r
        kv, gate = self.kv(h).view(B, w, r, C), self.gate(h).view(B, w, r, C) + self.position_bias
        new_kv = kv.new_zeros((B, w, 2 * r, C))
        new_gate = gate.new_full((B, w, 2 * r, C), float("-inf"))
        new_kv[:, :, r:] = kv
        new_gate[:, :, r:] = gate
        new_kv[:, 1:, :r] = kv[:, :-1]
        new_gate[:, 1:, :r] = gate[:, :-1]
        pooled = (new_kv * new_gate.softmax(dim=2)).sum(dim=2)
        return pooled.repeat_interleave(r, dim=1)


class WindowPoolLM(Fp32ResidualLM):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, WindowPool)


def window_pool_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(WindowPoolLM)


class FlexAttentionBlock(nn.Module):
    """Research code's attention through ``flex_attention`` (gpt-fast, torchtitan): a causal
    score function that adds a learned per-head bias (ALiBi-like slopes times distance)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.d = cfg.n_head, cfg.n_embd // cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)
        self.out = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.slopes = nn.Parameter(torch.linspace(0.1, 0.5, cfg.n_head))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import flex_attention

        B, T, C = x.size()
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.d).permute(2, 0, 3, 1, 4)

        def causal_alibi(score, b, h, i, j):  # type: ignore[no-untyped-def]
            return torch.where(i >= j, score - self.slopes[h] * (i - j), -float("inf"))

        y = flex_attention(q, k, v, score_mod=causal_alibi)
        return self.out(y.transpose(1, 2).reshape(B, T, C))  # type: ignore[no-any-return]


def flex_attention_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, FlexAttentionBlock, None)


class DepthRoutedBlock(nn.Module):
    """Mixture-of-Depths: a router scores each token, the top half goes through the block, and the
    block's update, gated by the sigmoid of the gathered router score, is scattered back into the
    stream (``scatter_add``)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.router = nn.Linear(cfg.n_embd, 1)
        self.ln = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        w = self.router(x).squeeze(-1)
        top = torch.topk(w, T // 2, dim=1).indices.sort(dim=1).values
        idx = top[..., None].expand(B, T // 2, D)
        sel = torch.gather(x, 1, idx)
        update = self.mlp(self.ln(sel)) * torch.sigmoid(torch.gather(w, 1, top))[..., None]
        return x.scatter_add(1, idx, update)


class GatedResidualMLP(nn.Module):
    """A scalar gate per token on the MLP's update (highway-style): ``sigmoid(Linear(d, 1)(x))``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.n_embd, 1)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x) * torch.sigmoid(self.gate(x))


class DepthRoutedLM(SplitKeyLM):
    """The routed block is the stream's update itself (it returns the stream with the chosen
    tokens' updates added), then a plain MLP block."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__(cfg, scatter=False)
        self.routed = DepthRoutedBlock(cfg)

    def trunk(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.routed(self.embed(idx))
        x = x + self.mlp(self.ln2(x))
        return self.norm(x)  # type: ignore[no-any-return]


def depth_routed_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(DepthRoutedLM)


def scalar_gated_lm():  # type: ignore[no-untyped-def]
    return _tiny_lm(_split_key_variant, None, GatedResidualMLP)


class DocumentMaskedAttention(nn.Module):
    """flex_attention with a block mask built from an input: each token attends causally within
    its own document (``create_block_mask`` over a mask function reading the document ids)."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)

        def same_document_causal(b, h, i, j):  # type: ignore[no-untyped-def]
            return (docs[b, i] == docs[b, j]) & (i >= j)

        mask = create_block_mask(same_document_causal, B, None, T, T, device=x.device)
        return self.out(flex_attention(q, k, v, block_mask=mask).transpose(1, 2).reshape(B, T, C))  # type: ignore[no-any-return]


def documents(*lengths: int) -> torch.Tensor:
    """Document ids of two examples made of documents of these lengths."""
    return torch.cat([torch.full((2, n), i) for i, n in enumerate(lengths)], 1)
