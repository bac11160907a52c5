"""Hidden user preferences for the frecency simulation (Mozilla paper, Section 6.1).

The simulated users choose what they want by frecency with *hidden* weights plus Gaussian
noise. Two presets, for each frecency model (:func:`hidden_weights`); first the classic
weights:

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

For modern frecency (``model="modern"``, parameters
:data:`~fedrank.models.frecency.modern.MODERN_WEIGHT_NAMES`):

* ``paper``: Firefox's defaults (20, 50, 100, 200, 30 days).
* ``shifted``: users who value the pages they typed or bookmarked (high class) far more
  than pages reached by links (medium), redirect sources and embedded pages (low) not at
  all, and whose interest fades faster (half-life 20 days instead of 30):

  ==============  =======  ======
  parameter       default  hidden
  ==============  =======  ======
  lowWeight            20       0
  mediumWeight         50       5
  highWeight          100     120
  veryHighWeight      200     200
  halfLifeDays         30      20
  ==============  =======  ======

  It satisfies :func:`~fedrank.optim.constraints.modern_frecency_safeguards` (non-negative,
  ``low <= medium <= high <= veryHigh``, half-life >= 1 day) and every value lies within
  120 of its default. Only the ratios of the class weights matter (a common factor shifts
  every score by the same number of days), so a learned model may match it at another
  scale. Synthetic histories have no interactions, so no sample is veryHigh and
  ``veryHighWeight`` gets no signal; it is left at its default. How far the hidden
  weights themselves beat the defaults (the ``oracle`` entry) is measured in
  docs/frecency.md: by 0.23 characters typed for classic ``shifted`` (five seeds), and
  not at all for modern ``shifted`` in the calibrated world.
"""

from __future__ import annotations

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.frecency.modern import MODERN_WEIGHT_NAMES, ModernFrecency
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

MODERN_SHIFTED_CHANGES: dict[str, float] = {
    "lowWeight": 0.0,
    "mediumWeight": 5.0,
    "highWeight": 120.0,
    "halfLifeDays": 20.0,
}

PRESETS = ("paper", "shifted")


def hidden_weights(preset: str, model: str = "classic") -> np.ndarray:
    """The hidden weights of a preset for the frecency ``model`` (``classic`` or
    ``modern``), in that model's parameter order."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if model == "classic":
        return classic_defaults() if preset == "paper" else weights_from_dict(SHIFTED_CHANGES)
    if model == "modern":
        weights = ModernFrecency.defaults()
        if preset == "shifted":
            for name, value in MODERN_SHIFTED_CHANGES.items():
                weights[MODERN_WEIGHT_NAMES.index(name)] = value
        return weights
    raise ConfigError(f"unknown frecency model {model!r}; choose one of classic, modern")
