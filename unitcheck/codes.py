"""The one table of stable rule codes (SPEC 4). Codes are never reused; a new rule gets a new code.

Each code's documentation is written in ruff's sections (What it does / Why it matters / Example /
Fix); ``unitcheck rule UC201`` prints it and ``docs/rules/UC*.md`` is generated from it. This
module imports nothing heavy so that ``unitcheck rules`` starts without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Code", "CODES", "Severity"]

Severity = Literal["error", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    severity: Severity
    summary: str
    doc: str
    fix: str
    status: Literal["stable", "preview", "deprecated", "removed"] = "stable"
    opt_in: bool = False


def _c(code: str, name: str, severity: Severity, summary: str, fix: str, doc: str, **kw: bool) -> Code:
    return Code(code, name, severity, summary, doc.strip("\n"), fix, **kw)  # type: ignore[arg-type]


_TABLE = [
    _c(
        "UC101", "mismatched-combine", "error",
        "mismatched units in a same-unit combine (add, sub, where, cat, ...)",
        "canonicalise both operands with C(x) = x / sqrt(RMS(x)^2 + eps) before combining, "
        "or give one operand an explicit dimensionless conversion",
        """
## What it does
Flags an addition, subtraction, `where`, `cat`, `stack`, `maximum`, `lerp` or comparison whose
operands carry different neural units.

## Why it matters
The op is not equivariant: rescaling one generator (a weight's norm, an input's scale) changes the
*mix* of the two operands, so the result depends on an arbitrary choice of coordinates. A token
table and a learned position table added together are the classic case: each table is a separate
scale degree of freedom.

## Example
```python
h = self.wte(idx) + self.wpe(pos)   # p:wte  vs  p:wpe
```

## Fix
Canonicalise each operand first (seed 000, the canonicaliser C), so both are dimensionless:
```python
h = C(C(self.wte(idx)) + C(self.wpe(pos)))
```
""",
    ),
    _c(
        "UC102", "residual-mismatch", "error",
        "residual add whose stream and branch units differ",
        "use the orthogonalised residual update h <- C(h + alpha * C(P_perp_h(a))) "
        "with a dimensionless alpha initialised at 1/sqrt(2L)",
        """
## What it does
Flags a residual addition `h + f(h)` whose stream `h` and branch output `f(h)` carry different
units. It is UC101 specialised to the residual stream (the branch is computed from the stream).

## Why it matters
The residual step size alpha = RMS(branch)/RMS(stream) is then set by raw weight norms, not by a
dimensionless design choice; the stream's scale drifts with depth (s_{l+1}^2 = s_l^2 (1 + alpha^2
+ 2 alpha c)) and per-token scale spread kappa_scale eats quantisation bits.

## Example
```python
x = x + self.attn(self.ln_1(x))     # stream v:... vs branch p:c_proj · ...
```

## Fix
Work on canonical coordinates and orthogonalise the update (seed 000, GCT):
```python
h = C(h + alpha * C(a - (a * h).sum(-1, keepdim=True) / (h * h).sum(-1, keepdim=True) * h))
```
""",
    ),
    _c(
        "UC103", "unitful-literal-add", "error",
        "a non-zero, non-floor literal added to a unitful tensor",
        "make the constant carry the tensor's unit (a learned bias) or canonicalise first",
        """
## What it does
Flags `x + c` (or `x - c`, `clamp(x, c)`, `x > c`) where `c` is a Python literal that is neither
zero, infinite, nor a tiny numerical floor, and `x` carries a unit.

## Why it matters
A literal is dimensionless; adding it to a unitful tensor gives a result whose meaning depends on
the tensor's arbitrary scale (`x + 1` is a large or a negligible shift depending on RMS(x)).

## Example
```python
y = torch.log(x + 1.0)
```

## Fix
Canonicalise `x` first (`C(x) + 1.0`), or replace the literal by a learned parameter that takes the
unit of `x`.
""",
    ),
    _c(
        "UC201", "attention-temperature", "error",
        "attention logits carry a unit (temperature depends on raw scales)",
        "canonicalise q and k per head and use the calibrated temperature "
        "tau = sqrt(d_h) * s_Q * s_K with dimensionless per-head gains",
        """
## What it does
Flags attention (fused `scaled_dot_product_attention`, or a softmax over `q @ k^T` that then
weights values) whose logits `q . k / sqrt(d_h)` carry the unit u(q) + u(k) instead of being
dimensionless.

## Why it matters
The softmax temperature then depends on the norms of the query and key projections (and of the
norm gains before them): rescaling a weight sharpens or flattens attention. UVI_attn measures the
same drift dynamically.

## Example
```python
att = F.scaled_dot_product_attention(q, k, v)   # u(q)+u(k) = p:ln_1.weight^2 · p:c_attn.weight^2
```

## Fix
Canonicalise q and k per head and use the calibrated temperature tau = sqrt(d_h) s_Q s_K (seed
000); with C(q), C(k) the standard sqrt(d_h) is the s_Q = s_K = 1 case, and a dimensionless
per-head gain keeps the model's freedom to sharpen attention:
```python
q, k = C(q) * gain[:, None, None], C(k)
att = F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(d_h))
```
""",
    ),
    _c(
        "UC202", "unitful-activation", "error",
        "non-homogeneous activation (gelu, silu, tanh, sigmoid, ...) of a unitful input",
        "canonicalise the activation input: gelu(C(a)), or the normalised gate C(a) * sigma(C(a))",
        """
## What it does
Flags a non-homogeneous activation (gelu, silu, tanh, sigmoid, softplus, erf, ...) applied to a
tensor that carries a unit.

## Why it matters
These functions have a built-in scale (their kink or saturation sits at |x| ~ 1): feeding them a
unitful input makes the network's nonlinearity depend on raw weight norms. Rescaling the preceding
weight moves the operating point from linear to saturated.

## Example
```python
h = F.gelu(self.c_fc(x))
```

## Fix
Canonicalise the input (seed 000): `gelu(C(a))`; for gated MLPs the normalised gate
`C(a) * sigmoid(C(a))`.
""",
    ),
    _c(
        "UC203", "unitful-softmax", "error",
        "softmax / log-softmax of a unitful input outside attention",
        "canonicalise the input and apply a dimensionless, learnable temperature",
        """
## What it does
Flags `softmax` or `log_softmax` of a unitful input that is not attention (see UC201) and not the
logits of a likelihood loss (see UC301).

## Why it matters
Softmax is invariant to shifts, not to scale: a unitful input makes the distribution's entropy a
function of arbitrary weight norms.

## Example
```python
w = torch.softmax(self.router(x), dim=-1)
```

## Fix
`torch.softmax(g * C(self.router(x)), -1)` with a dimensionless gain `g`.
""",
    ),
    _c(
        "UC204", "unitful-transcendental", "error",
        "exp, log or trigonometric function of a unitful input",
        "divide by the matching scale S with u(S) = u(x) first (x / S is dimensionless)",
        """
## What it does
Flags `exp`, `log`, `sin`, `cos`, `pow(c, x)` and similar transcendental functions of a tensor
that carries a unit.

## Why it matters
exp(x) of a unitful x is not a unit at all: exp(c x) != c^k exp(x) for any k. The function's
output depends on the coordinates chosen for x.

## Example
```python
scale = torch.exp(self.log_scale_proj(h))
```

## Fix
Make the argument dimensionless: canonicalise it, or divide by a scale that carries its unit.
""",
    ),
    _c(
        "UC301", "unitful-logits", "error",
        "cross-entropy (or another likelihood loss) on unitful logits",
        "compute dimensionless logits from C(h_L) with a learnable dimensionless logit gain",
        """
## What it does
Flags a likelihood loss (cross-entropy, NLL after log-softmax, BCE with logits) whose logits carry
a unit.

## Why it matters
The loss's temperature is then set by the norms of the final norm gain and the output head; the
whole model's calibration drifts when either is rescaled, and Prop. 1's dual typing of gradients
no longer holds.

## Example
```python
loss = F.cross_entropy(self.lm_head(self.ln_f(x)), targets)
```

## Fix
Dimensionless logits (seed 000, GCT): `logits = gain * C(h_L) @ C(W_E).T / sqrt(d)`.
""",
    ),
    _c(
        "UC302", "loss-not-dimensionless", "error",
        "loss that is not dimensionless",
        "divide the loss by a scale S with u(S) = u(L): lambda = alpha / S",
        """
## What it does
Flags a scalar training loss whose unit is not dimensionless (for example the MSE of two unitful
tensors, unit u(x)^2).

## Why it matters
Gradients then carry u(L) - u(v) instead of the dual unit -u(v) (Prop. 1); the effective learning
rate depends on the data's physical unit.

## Example
```python
loss = F.mse_loss(pred, y)    # in:y^2
```

## Fix
Normalise by a scale carrying the loss unit: `loss = F.mse_loss(pred, y) / S` with u(S) = u(L),
e.g. `S = y.pow(2).mean().detach()`.
""",
    ),
    _c(
        "UC303", "loss-terms-mismatch", "error",
        "loss terms with different units summed",
        "weight each term by lambda_i = alpha_i / S_i with u(S_i) = u(L_i) and dimensionless alpha_i",
        """
## What it does
Flags a sum of scalar loss terms whose units differ (a PDE residual and a boundary term, a
reconstruction and a KL term in different units).

## Why it matters
The relative weight of the terms changes when a physical or internal unit is rescaled: a model
tuned in metres fails in millimetres.

## Example
```python
loss = residual.pow(2).mean() + (u_b - g).pow(2).mean()
```

## Fix
Unit-aware loss weights (seed 000): `lambda_i = alpha_i / S_i`, see `unitcheck.losses`.
""",
    ),
    _c(
        "UC401", "update-unit", "warning",
        "learning rate unit inconsistent with the parameter's unit for the optimizer",
        "use per-parameter learning rates with u(eta) = u(W) (Adam) or u(eta) = 2 u(W) (SGD)",
        """
## What it does
Given an optimizer, checks that each parameter's step has the parameter's unit: SGD's
`eta * grad` has unit u(eta) - u(W), consistent iff u(eta) = 2 u(W); Adam's `m / sqrt(v)` is
dimensionless, consistent iff u(eta) = u(W) (SPEC 6).

## Why it matters
A single dimensionless learning rate over parameters of different units moves some of them by a
relatively huge and others by a negligible amount; the balance changes when any is rescaled.

## Example
```python
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)   # one lr for p:wte, p:c_fc, ...
```

## Fix
Per-parameter learning rates proportional to the parameter's scale (eta_W ∝ RMS(W) for Adam), or
parameters declared dimensionless by a norm constraint (nGPT).
""",
        opt_in=True,
    ),
    _c(
        "UC402", "weight-decay-unit", "warning",
        "weight decay that is not dimensionless",
        "make eta * lambda dimensionless: scale lambda by 1/u(eta)",
        """
## What it does
Checks that decoupled weight decay's factor `eta * lambda` is dimensionless for each parameter.

## Why it matters
Otherwise the shrinkage per step depends on the parameter's arbitrary scale.

## Example
```python
torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1)   # with unitful per-parameter lr
```

## Fix
Choose lambda with u(lambda) = -u(eta), or drop weight decay on norm-constrained weights.
""",
        opt_in=True,
    ),
    _c(
        "UC901", "unknown-op", "warning",
        "operator with no unit rule (analysis continued with an opaque scale)",
        "register a rule for the operator with @unitcheck.rule(target)",
        """
## What it does
Reports an operator for which unitcheck has no rule. Its output gets a fresh opaque generator and
the analysis continues.

## Why it matters
Nothing downstream of the op is checked by the oracle's global mode; the coverage figure drops.

## Example
```python
y = torch.special.i0(x)
```

## Fix
Register a rule: `@unitcheck.rule(torch.ops.aten.special_i0.default)` returning the output unit.
""",
    ),
    _c(
        "UC902", "numerical-floor", "info",
        "numerical floor (eps) treated as unit-transparent",
        "none needed; the floor should stay small relative to the quantity it guards",
        """
## What it does
Notes `x + eps` with a tiny literal (default |eps| <= 1e-3), as in `var + eps` inside a norm, and
`clamp_min(x, eps)`.

## Why it matters
Strictly, eps carries the unit of what it guards; treating it as transparent is exact only while
eps is negligible. The oracle rescales eps with that unit so its checks stay exact.

## Example
```python
x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
```

## Fix
None needed.
""",
    ),
    _c(
        "UC903", "capture-fallback", "info",
        "tracer fell back from torch.export, or a part of the model could not be captured",
        "make forward traceable by torch.export (no data-dependent Python branches)",
        """
## What it does
Notes that `torch.export` failed and symbolic tracing was used, or that part of the model could
not be captured.

## Why it matters
The fallback tracer can miss in-place buffer updates and specialises Python control flow.

## Example
A `forward` that branches on a tensor value.

## Fix
Replace data-dependent branches by `torch.where` or `torch.cond`.
""",
    ),
]

CODES: dict[str, Code] = {c.code: c for c in _TABLE}
