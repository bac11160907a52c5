"""Distributed differential privacy in the service (``[privacy] mode = 'distributed'`` with
``[secagg]``; :mod:`fedrank.privacy.skellam`, docs/privacy.md "Distributed DP"): SDK clients
over loopback add their Skellam shares to their encoded deltas before masking, so the
server learns only the noisy sum; the published step is exactly that sum (recomputed from
the clients' seeded noise), the noise is really there, ``/v1/status`` reports the Skellam
accounting and the budget stops the server. Configurations that mix the two wrongly are
refused with the reason."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from fedrank.client import Client
from fedrank.client.sdk import Checkin
from fedrank.client.secagg import send_secure
from fedrank.client.user_ledger import UserLedger
from fedrank.errors import ConfigError, FedrankError
from fedrank.privacy.skellam import skellam_noise
from fedrank.secagg.field import FixedPointEncoder
from fedrank.server.privacy import distributed_plan, report_config
from tests.server.serverkit import (
    assert_error,
    issue_tokens,
    live_server,
    offline_config,
    status,
    wait_until,
)
from tests.server.test_server_secagg import DIM, L2
from tests.server.test_server_secagg import TOML as SECAGG_TOML
from tests.server.test_server_secagg import K as SECAGG_K

K, EPSILON, DELTA = 5, 4.0, 1e-6
CLIP = L2
TOML = (
    SECAGG_TOML.replace(f"clients_per_round = {SECAGG_K}", f"clients_per_round = {K}")
    + f"""
[privacy]
mode = "distributed"
epsilon = {EPSILON}
delta = {DELTA}
clip = {CLIP}
rounds = 1
accountant = "rdp"
"""
)


def _deltas() -> np.ndarray:
    rng = np.random.default_rng(11)
    rows = rng.normal(size=(K, DIM))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) * rng.uniform(0.2, 1.8, (K, 1))


def _noise_rng(i: int) -> np.random.Generator:
    return np.random.default_rng([77, i])


def _client_run(
    url: str, token: str, i: int, delta: np.ndarray, ledger_dir: Path | None = None
) -> str:
    """Client ``i``'s secure round, a device enrolled with ``token``; client 0 keeps a
    user's budget in ``ledger_dir``."""
    budget = 10.0 if i == 0 and ledger_dir is not None else None
    with Client(
        url, state_dir=ledger_dir if budget else None, rng=np.random.default_rng(i),
        privacy_budget=budget, enrollment_token=token,
    ) as client:  # fmt: skip
        checkin = client.checkin()
        assert checkin.selected and checkin.secagg is not None
        report = send_secure(client, checkin, delta, poll_seconds=0.05, noise_rng=_noise_rng(i))
        return report.outcome or report.sent


def test_clients_noise_the_sum_the_server_publishes_it_and_stops_at_the_budget(
    tmp_path: Path,
) -> None:
    plan = distributed_plan(offline_config(TOML, tmp_path))
    assert plan is not None
    deltas = _deltas()
    with live_server(tmp_path, TOML) as live:
        url = live.process.url
        first = status(live.client)["privacy"]
        params0 = np.array(live.client.get("/v1/model").json()["params"])
        tokens = issue_tokens(live.store, K)
        with ThreadPoolExecutor(max_workers=K) as pool:
            outcomes = list(
                pool.map(
                    lambda i: _client_run(url, tokens[i], i, deltas[i], tmp_path / "user"),
                    range(K),
                )
            )
        final = wait_until(
            lambda: (s := status(live.client))["model_version"] == 1 and s,
            timeout=60,
            what="the secure round's close",
        )
        params1 = np.array(live.client.get("/v1/model").json()["params"])
        late = live.client.post("/v1/checkin", json={"client_id": "late"})
    assert outcomes == ["finished"] * K
    # The published step is the sum of the clients' encoded deltas and noise shares, decoded
    # and averaged over the K contributors (server learning rate 1).
    encoder = FixedPointEncoder(plan.scale, K, l2_bound=CLIP)
    ints = sum(
        np.rint(encoder.clip(d) * plan.scale).astype(np.int64)
        + skellam_noise(_noise_rng(i), plan.client_variance, DIM)
        for i, d in enumerate(deltas)
    )
    np.testing.assert_allclose(params1 - params0, ints / plan.scale / K, rtol=0, atol=1e-12)
    clear = np.mean([encoder.clip(d) for d in deltas], axis=0)
    assert np.max(np.abs(params1 - params0 - clear)) > 1e3 * encoder.error_bound(K)  # noised
    # What /v1/status reports is the Skellam accounting of the plan, and the budget holds.
    assert first["mechanism"] == "skellam (distributed, secure aggregation)"
    assert first["epsilon"] == 0.0 and first["budget_spent"] is False
    privacy = final["privacy"]
    assert privacy["epsilon"] == pytest.approx(plan.epsilon_after(1), rel=1e-12)
    assert 3.9 < privacy["epsilon"] <= EPSILON
    assert privacy["noise_multiplier"] == pytest.approx(plan.noise_multiplier)
    assert privacy["clip"] == CLIP and privacy["budget_spent"] is True
    assert_error(late, 403, "privacy_budget_spent")
    # Client 0's own ledger accounted the round as the plan does: the same Skellam mechanism
    ledger = UserLedger(tmp_path / "user", budget=10.0)
    (event,) = ledger.events()
    assert event.mechanism == "skellam"
    assert event.value == pytest.approx(plan.client_variance * plan.threshold, rel=1e-12)
    assert ledger.epsilon() == pytest.approx(plan.epsilon_after(1), rel=1e-9)


def test_the_report_of_a_distributed_configuration(tmp_path: Path) -> None:
    config = offline_config(TOML.replace("rounds = 1", "rounds = 50"), tmp_path)
    plan = distributed_plan(config)
    assert plan is not None
    (row,) = report_config(config, None)
    assert row.mechanism == "skellam (distributed, secure aggregation)"
    assert isinstance(row.per_message, str) and "1/t share" in row.per_message
    assert row.per_user["epsilon"] == pytest.approx(plan.epsilon_after(50))
    assert row.per_user["epsilon"] <= EPSILON and row.per_user["rounds"] == 50
    assert row.per_round["epsilon"] < row.per_user["epsilon"]
    (ten,) = report_config(config, 10)
    assert ten.per_user["epsilon"] == pytest.approx(plan.epsilon_after(10))
    assert any("colluding" in note for note in row.notes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('mode = "distributed"\n', ""), "mode = 'distributed'"),  # central DP + secagg
        (('accountant = "rdp"\n', ""), "accountant = 'rdp'"),
        ((f"clip = {CLIP}\n", "clip = 0.5\n"), "must equal"),
        (("accountant", "noise_seed = 3\naccountant"), "noise_seed"),
        (('mode = "distributed"', 'mode = "local"'), "mode must be one of central, distributed"),
    ],
)
def test_distributed_configurations_that_are_refused(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        offline_config(TOML.replace(*change), tmp_path)


def test_distributed_dp_needs_secure_aggregation(tmp_path: Path) -> None:
    text = TOML.replace("[secagg]\nenabled = true\n", "[secagg]\nenabled = false\n")
    with pytest.raises(ConfigError, match="needs \\[secagg\\] enabled = true"):
        offline_config(text, tmp_path)


@pytest.mark.parametrize("variance", [float("nan"), -1.0, float("inf"), 2.0**63])
def test_the_client_refuses_a_noise_share_it_cannot_draw(variance: float) -> None:
    """A check-in whose ``noise_variance`` is not a finite share that fits 32-bit sums is
    refused before anything is sent (the client at port 9 is never contacted)."""
    block = {
        "session": "AAAAAAAAAAAAAAAAAAAAAA==",
        "id": 1,
        "threshold": 2,
        "dimension": DIM,
        "l2_bound": CLIP,
        "scale": 1024.0,
        "max_clients": K,
        "noise_variance": variance,
    }
    checkin = Checkin("c", True, 0, secagg=block)
    with Client("http://127.0.0.1:9") as client, pytest.raises(FedrankError, match="noise_var"):
        send_secure(client, checkin, np.zeros(DIM))


def test_proxies_take_part_only_in_distributed_dp(tmp_path: Path) -> None:
    """Under distributed DP proxies only sum masked inputs (the clients clip and add the
    noise); under central DP a merged aggregate would hide what the server must clip."""
    proxies = '[[proxies]]\nname = "p"\ntoken = "proxy-token-0123456789"\n'
    assert offline_config(TOML + proxies, tmp_path).proxies[0].name == "p"
    central = TOML.replace('mode = "distributed"\n', "").replace(
        "[secagg]\nenabled = true\n", "[secagg]\nenabled = false\n"
    )
    with pytest.raises(ConfigError, match="cannot take \\[\\[proxies\\]\\]"):
        offline_config(central + proxies, tmp_path)
