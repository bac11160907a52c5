"""Simulated users of a real frecency study, for the dashboard tests: each user is a
:class:`fedrank.client.Client` over HTTP with one of the real Firefox profiles of the
shared data folder, and does what ``fedrank client`` does (fetch the model, compute the
profile's update on the device, send it; a control branch sends its metrics only)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from fedrank.client import Client
from fedrank.client.frecency_update import ProfileSearches, frecency_update
from fedrank.server.branches import branch_of
from fedrank.server.config import ServerConfig
from fedrank.systems.frecency.client import FrecencyClient
from tests.server.serverkit import ADMIN_TOKEN

#: The real profiles (docs/frecency.md, "Real Firefox profiles").
PROFILES = ("places.sqlite", "places-aged.sqlite")


def enrollments(config: ServerConfig, branch: str, count: int, tag: str) -> list[str]:
    """``count`` enrollment ids the server puts in ``branch``."""
    shares = [(b.name, b.share) for b in config.branches]
    found = [f"{tag}-{i}" for i in range(100_000) if branch_of(f"{tag}-{i}", shares) == branch]
    return found[:count]


@dataclass
class Users:
    """``treatment`` and ``control`` users of a running server (``url``), with the real
    profiles of ``data`` assigned in turn; ``seed`` seeds every user's message ids and
    randomized coins."""

    url: str
    config: ServerConfig
    data: Path
    treatment: int
    control: int
    seed: int = 0

    def __post_init__(self) -> None:
        self.http = httpx.Client(timeout=30.0)
        # the control users first: the treatment users' updates may close the iteration
        ids = enrollments(self.config, "control", self.control, f"c{self.seed}")
        ids += enrollments(self.config, "treatment", self.treatment, f"t{self.seed}")
        searches = [ProfileSearches(self.data / "firefox" / name) for name in PROFILES]
        rng = np.random.default_rng(self.seed)
        self.users = [
            (
                Client(self.url, enrollment_id=e, http=self.http, rng=np.random.default_rng(rng)),
                searches[i % len(searches)],
            )
            for i, e in enumerate(ids)
        ]

    def step(self) -> list[str]:
        """Every user fetches the model and sends once; returns the answers' statuses
        (``accepted``, ``duplicate``, ...)."""
        statuses = []
        for client, searches in self.users:
            model = client.fetch_model()
            half = client.client_half(model)
            assert isinstance(half, FrecencyClient)
            payload, metrics = frecency_update(
                searches, model.params, half.config, rng=client.rng, max_n=model.config.get("max_n")
            )
            if model.served != "trained":
                payload = {}
            accepted = model.config.get("metrics")
            if accepted is not None:
                metrics = {k: v for k, v in metrics.items() if k in accepted}
            local = half.message_epsilon()
            result = client.send(payload, model.version, metrics, local_epsilon=local)
            statuses.append(result.status)
        return statuses

    def close(self) -> None:
        for client, _ in self.users:
            client.close()
        self.http.close()


#: A fedavg server under [privacy] whose counts /v1/status withholds without the admin
#: token (the dashboard's tests, in the page and in the browser).
PRIVATE = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[iteration]
seconds = 0.0
min_updates = 1000000000
[fedavg]
dim = 6
server_learning_rate = 1.0
[privacy]
epsilon = 4.0
delta = 1e-6
clip = 0.5
rounds = 3
noise_seed = 11
"""
