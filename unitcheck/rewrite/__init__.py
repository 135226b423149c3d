"""Graph rewrites: the Gauge-Canonical Transformer form and the NVFP4 substitution.

>>> gct_model = unitcheck.rewrite_gct(model, (idx, targets), nvfp4="ngpt")   # doctest: +SKIP
"""

from __future__ import annotations

from .api import RewriteResult, rewrite_gct, write_rewrite

__all__ = ["rewrite_gct", "write_rewrite", "RewriteResult"]
