"""Hidden user preferences for the frecency simulation (Mozilla paper, Section 6.1).

The simulated users choose what they want by frecency with *hidden* weights plus Gaussian
noise. Two presets:

* ``paper``: the hidden weights are Firefox's defaults, as in the paper's mock data set
  ("it is easy to see whether the simulation finds useful weights, as they should be similar
  to the ones of the current algorithm"). Learning should stay near the defaults.
* ``shifted``: users whose interest fades faster than Firefox assumes (recency matters
  more: shorter first buckets, steeply falling bucket weights), who value pages reached by
  links and bookmarks more, and redirect sources not at all. The differences, against the
  defaults:

  ==========================  =======  =======
  weight                      default  hidden
  ==========================  =======  =======
  firstBucketCutoff                 4        2
  secondBucketCutoff               14        7
  secondBucketWeight               70       20
  thirdBucketWeight                50        5
  fourthBucketWeight               30        1
  defaultBucketWeight              10        0
  linkVisitBonus                  100      200
  typedVisitBonus                2000     1900
  bookmarkVisitBonus               75      150
  redirectSourceVisitBonus         25        0
  ==========================  =======  =======

  Every hidden weight satisfies the safeguards (non-negative, ordered buckets, increasing
  cutoffs) and lies within 120 of its default, the distance the per-iteration bound of 3
  allows in 40 iterations, so the optimum is reachable in the study's budget. The study's
  evaluation reports, next to the branches, an ``oracle`` entry (treatment users ranked by
  the hidden weights themselves): the best any model could do.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.frecency.weights import classic_defaults, weights_from_dict

SHIFTED_CHANGES: dict[str, float] = {
    "firstBucketCutoff": 2.0,
    "secondBucketCutoff": 7.0,
    "secondBucketWeight": 20.0,
    "thirdBucketWeight": 5.0,
    "fourthBucketWeight": 1.0,
    "defaultBucketWeight": 0.0,
    "linkVisitBonus": 200.0,
    "typedVisitBonus": 1900.0,
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
