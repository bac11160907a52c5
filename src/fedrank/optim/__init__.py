"""Server-side optimizers (Optax-style ``init`` / ``update`` pairs) and the safeguards applied
after each step (docs/architecture.md; paper Sections 5.3 and 5.6).

* :class:`Rprop`: sign-based per-weight step sizes (paper Eq. (1)-(2)).
* :class:`SGD`, :class:`Adam`: baselines (PyTorch defaults for Adam).
* :mod:`fedrank.optim.constraints`: step bound, non-negativity, ordered weights, chains
  (the frecency chains: :mod:`fedrank.models.frecency.safeguards`).
"""

from fedrank.optim.adam import Adam, AdamState
from fedrank.optim.constraints import (
    ConstraintChain,
    LowerBound,
    NonIncreasing,
    NonNegative,
    StepBound,
    StrictlyIncreasing,
)
from fedrank.optim.rprop import Rprop, RpropState
from fedrank.optim.sgd import SGD, SGDState

__all__ = [
    "SGD",
    "Adam",
    "AdamState",
    "ConstraintChain",
    "LowerBound",
    "NonIncreasing",
    "NonNegative",
    "Rprop",
    "RpropState",
    "SGDState",
    "StepBound",
    "StrictlyIncreasing",
]
