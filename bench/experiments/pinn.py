"""Experiment 7: PINN units (seed 000). A 1D Poisson problem -u''(x) = f(x) on [0, X] with
u(0) = 0, u(X) = U; the PDE residual has unit U/X^2 and the boundary term unit U, so their mean
squares differ by X^4. The length unit X is swept over 10^4; three loss aggregations:

- equal weights (the plain sum the linter flags with UC303),
- an adaptive baseline (learning-rate annealing: the residual term reweighted by the ratio of
  gradient magnitudes, Wang et al. 2021),
- unit-aware weights lambda_i = alpha_i / S_i (``unitcheck.losses``) with a scaled output head
  u = U_s * net(x / X).

Reported: relative L2 error of u per scale, and the worst across the sweep (the seed: 0.015 for
the unit-aware weights).

    python bench/experiments/pinn.py [--quick]
"""

from __future__ import annotations

import math
from typing import Any

import torch
from common import Store, main, plt, save_fig
from torch import nn

SCALES = [0.01, 0.1, 1.0, 10.0, 100.0]  # the length unit X: 10^4 across the sweep
U = 1.0


def exact(x: torch.Tensor, X: float) -> torch.Tensor:
    return U * (torch.sin(math.pi * x / X) + x / X)


def forcing(x: torch.Tensor, X: float) -> torch.Tensor:
    return U * (math.pi / X) ** 2 * torch.sin(math.pi * x / X)


class Net(nn.Module):
    def __init__(self, X: float, scaled: bool) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
        self.X, self.scaled = X, scaled

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scaled:  # dimensionless core: u = U_s * net(x / X)
            return U * self.body(x / self.X)
        return self.body(x)


def second_derivative(net: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.requires_grad_(True)
    u = net(x)
    du = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
    d2u = torch.autograd.grad(du.sum(), x, create_graph=True)[0]
    return u, d2u


def solve(X: float, method: str, steps: int, seed: int = 0) -> float:
    from unitcheck.losses import unit_weighted

    torch.manual_seed(seed)
    net = Net(X, scaled=method == "unit-aware").double()
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    xs = torch.linspace(0, X, 64, dtype=torch.float64)[:, None]
    xb = torch.tensor([[0.0], [X]], dtype=torch.float64)
    ub = exact(xb, X)
    f = forcing(xs, X)
    lam = 1.0
    for _ in range(steps):
        _, d2u = second_derivative(net, xs.clone())
        residual = (-d2u - f).pow(2).mean()
        boundary = (net(xb) - ub).pow(2).mean()
        if method == "equal":
            loss = residual + boundary
        elif method == "adaptive":
            g_r = torch.autograd.grad(residual, list(net.parameters()), retain_graph=True, allow_unused=True)
            g_b = torch.autograd.grad(boundary, list(net.parameters()), retain_graph=True, allow_unused=True)
            max_r = max(float(g.abs().max()) for g in g_r if g is not None)
            mean_b = sum(float(g.abs().mean()) for g in g_b if g is not None) / len(g_b)
            lam = 0.9 * lam + 0.1 * (max_r / max(mean_b, 1e-30))  # boundary weight (Wang et al.)
            loss = residual + lam * boundary
        else:  # lambda_i = alpha_i / S_i with u(S_i) = u(L_i): S from the data's own scales
            loss = unit_weighted({"pde": residual, "bc": boundary},
                                 scales={"pde": f.pow(2).mean(), "bc": ub.pow(2).mean()})
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        xt = torch.linspace(0, X, 256, dtype=torch.float64)[:, None]
        err = (net(xt) - exact(xt, X)).norm() / exact(xt, X).norm()
    return float(err)


def lint_the_sums() -> dict[str, list[str]]:
    """The linter on the two loss aggregations, with the physical units declared on the inputs."""
    import unitcheck

    class Plain(nn.Module):
        def forward(self, residual: torch.Tensor, boundary: torch.Tensor) -> torch.Tensor:
            return residual.pow(2).mean() + boundary.pow(2).mean()

    class UnitAware(nn.Module):
        def forward(self, residual: torch.Tensor, boundary: torch.Tensor, s_pde: torch.Tensor, s_bc: torch.Tensor) -> torch.Tensor:
            from unitcheck.losses import unit_weighted

            return unit_weighted({"pde": residual.pow(2).mean(), "bc": boundary.pow(2).mean()},
                                 {"pde": s_pde, "bc": s_bc})

    units = {"residual": "s:U * s:X^-2", "boundary": "s:U", "s_pde": "s:U^2 * s:X^-4", "s_bc": "s:U^2"}
    r, b = torch.randn(8), torch.randn(2)
    plain = unitcheck.lint(Plain(), (r, b), input_units=units)
    aware = unitcheck.lint(UnitAware(), (r, b, torch.tensor(2.0), torch.tensor(3.0)), input_units=units)
    return {"equal": [v.rule for v in plain.violations], "unit-aware": [v.rule for v in aware.violations]}


def run(quick: bool) -> dict[str, Any]:
    store = Store("pinn", quick)
    steps = 150 if quick else 4000
    scales = [0.01, 1.0, 100.0] if quick else SCALES
    methods = ["equal", "adaptive", "unit-aware"]
    for X in scales:
        for m in methods:
            store.get_or_run(f"{m}|{X:g}", lambda m=m, X=X: {"method": m, "X": X, "rel_l2": solve(X, m, steps)})
    worst = {m: max(store.data["entries"][f"{m}|{X:g}"]["rel_l2"] for X in scales) for m in methods}
    store.set("worst", worst)
    store.set("lint", lint_the_sums())
    p = plt()
    fig, ax = p.subplots(figsize=(6, 4))
    for i, m in enumerate(methods):
        ax.plot(scales, [store.data["entries"][f"{m}|{X:g}"]["rel_l2"] for X in scales], "-o", color=f"C{i}", label=m)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("length unit X")
    ax.set_ylabel("relative L2 error of u")
    ax.set_title("1D Poisson PINN across a 10^4 unit sweep")
    ax.legend()
    ax.grid(alpha=0.3)
    save_fig(fig, store.png("pinn"))
    return {"worst": worst, "lint": store.data["lint"]}


if __name__ == "__main__":
    main(run)
