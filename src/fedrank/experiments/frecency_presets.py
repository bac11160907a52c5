"""Hidden user preferences for the frecency simulation (Mozilla paper, Section 6.1).

The simulated users choose what they want by frecency with *hidden* weights plus Gaussian
noise. Two presets:

* ``paper``: the hidden weights are Firefox's defaults, as in the paper's mock data set
  ("it is easy to see whether the simulation finds useful weights, as they should be similar
  to the ones of the current algorithm"). Learning should stay near the defaults.
* ``shifted``: users who care more about recency and about pages they reached by links or
  bookmarks, and less about typed pages and redirect sources than Firefox assumes. The
  differences, against the defaults:

  ==========================  =======  =======
  weight                      default  hidden
  ==========================  =======  =======
  secondBucketWeight               70       45
  thirdBucketWeight                50       25
  fourthBucketWeight               30       12
  defaultBucketWeight              10        4
  linkVisitBonus                  100      200
  typedVisitBonus                2000     1500
  bookmarkVisitBonus               75      150
  redirectSourceVisitBonus         25        0
  ==========================  =======  =======

  Every hidden weight still satisfies the safeguards (non-negative, ordered buckets,
  increasing cutoffs), so the optimum is reachable.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.frecency.weights import classic_defaults, weights_from_dict

SHIFTED_CHANGES: dict[str, float] = {
    "secondBucketWeight": 45.0,
    "thirdBucketWeight": 25.0,
    "fourthBucketWeight": 12.0,
    "defaultBucketWeight": 4.0,
    "linkVisitBonus": 200.0,
    "typedVisitBonus": 1500.0,
    "bookmarkVisitBonus": 150.0,
    "redirectSourceVisitBonus": 0.0,
}

PRESETS = ("paper", "shifted")


def hidden_weights(preset: str) -> np.ndarray:
    """The hidden classic frecency weights of a preset."""
    if preset == "paper":
        return classic_defaults()
    if preset == "shifted":
        return weights_from_dict(SHIFTED_CHANGES)
    raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
