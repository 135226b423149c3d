"""Built-in unit rules, one module per operator family (SPEC 3).

Each module registers small functions with :func:`unitcheck.rule` for explicit targets. A user
adds a rule for their own op the same way, without touching the engine.
"""

from . import (  # noqa: F401
    activation,
    attention,
    combine,
    constants,
    embedding,
    index,
    linalg,
    linear,
    loss,
    norm,
    power,
    reduce,
    shape,
)
