"""FOLtR-ES's client half (Kharitonov, WSDM 2019, Sections 3.2-3.3): what a device does with
the served model and its own user's clicks.

A client takes a seed ``s`` (its own, or the one the server issued at check-in), perturbs
the model ``phi + sigma v_s`` with the noise of the seed (:meth:`ESTask.perturbed`, and
``phi - sigma v_s`` with antithetic variates), ranks its ``B`` queries with it, takes the
MaxRR of each interaction, privatizes each by randomized response over MaxRR's ``n = 11``
values (:attr:`FoltrEsClient.privatizer`, Sec. 3.3) and sends the seed with the mean:
:func:`~fedrank.systems.foltr_es.wire.es_payload`.

The simulator runs the same half for every client of an iteration at once
(:meth:`FoltrEsClient.estimator`: :class:`~fedrank.estimators.evolution_strategies.
ESEstimator`, with a click model standing in for the users).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrank.core.seeded_noise import gaussian_noise
from fedrank.errors import FedrankError
from fedrank.estimators.evolution_strategies import ESEstimator
from fedrank.metrics.maxrr import maxrr_values
from fedrank.models.click_models import ClickModel
from fedrank.models.rankers import Ranker, make_ranker
from fedrank.privacy.randomized_response import RandomizedResponse
from fedrank.systems.foltr_es.config import MAXRR_VALUES, FoltrEsConfig


@dataclass(frozen=True)
class ESTask:
    """What a FOLtR-ES client evaluates and reports (Sec. 3.2): perturb the model of
    ``model_version`` with the noise of ``seed`` (:meth:`perturbed`), average the
    (privatized) metric over its ``B`` interactions, and send it. ``seed_token`` is the
    server's token for an issued seed (``None``: the client drew the seed itself);
    ``client_id`` is the id the client checked in with (rounds)."""

    model_version: int
    seed: int
    seed_token: str | None = None
    client_id: str | None = None

    def perturbed(self, params: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
        """``(phi + sigma v_s, phi - sigma v_s)`` (Eq. 4; the second is the antithetic
        perturbation), float32 as the simulator's clients compute them
        (:class:`~fedrank.estimators.evolution_strategies.ESEstimator`)."""
        theta = np.asarray(params, dtype=np.float32)
        step = np.float32(sigma) * gaussian_noise(self.seed, theta.size)
        return theta + step, theta - step


class FoltrEsClient:
    """The client half for one :class:`FoltrEsConfig` (module docstring)."""

    def __init__(self, config: FoltrEsConfig) -> None:
        self.config = config
        self.ranker: Ranker = make_ranker(config.ranker, config.n_features)
        self.privatizer: RandomizedResponse | None = (
            None if config.p == 1 else RandomizedResponse(maxrr_values(), config.p)
        )

    def estimator(self, click_model: ClickModel) -> ESEstimator:
        """Every client of an iteration at once, its users' clicks drawn from
        ``click_model`` (the simulator's)."""
        c = self.config
        privatizer = (
            None
            if self.privatizer is None
            else RandomizedResponse(maxrr_values(click_model.depth), c.p)
        )
        return ESEstimator(self.ranker, click_model, c.sigma, c.batch, c.antithetic, privatizer)

    def task(
        self,
        model_version: int,
        rng: np.random.Generator,
        issued: tuple[int, str] | None = None,
        client_id: str | None = None,
    ) -> ESTask:
        """The report this client computes on the model of ``model_version``: with the
        ``(seed, seed_token)`` the server ``issued`` at check-in, or, where the server lets
        clients choose (``server_seeds`` off), a seed drawn from ``rng``."""
        if issued is not None:
            return ESTask(model_version, issued[0], issued[1], client_id)
        if self.config.server_seeds:
            raise FedrankError(
                "this server issues the seeds ([foltr_es] server_seeds): check in "
                "(Client.checkin) and pass the answer, which holds the seed"
            )
        return ESTask(model_version, int(rng.integers(2**32)), None, client_id)

    def message_epsilon(self) -> float | None:
        """The randomized response's epsilon of one message: ``B`` privatized interactions
        (Eq. 10 composed over them); ``None`` with ``p = 1``."""
        if self.privatizer is None:
            return None
        from fedrank.privacy.accounting import randomized_response_message_epsilon

        c = self.config
        return randomized_response_message_epsilon(c.p, MAXRR_VALUES, c.batch)
