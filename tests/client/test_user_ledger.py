"""The user's own privacy ledger (:mod:`fedrank.client.user_ledger`): its epsilon is the PLD
composition of exactly the rounds the user took part in (``dp_accounting`` called
directly), for central Gaussian and local pure-epsilon mechanisms alike; it refuses a second
update in a round and any round past the user's budget, it survives a restart of the client
(and carries a Gaussian-only ledger over), and through the SDK it stops updates to a real
server over loopback before anything is sent."""

from __future__ import annotations

import base64
import math
import sqlite3
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from dp_accounting.pld import privacy_loss_distribution as pld_of

from fedrank.client import Client
from fedrank.client.sdk import Checkin
from fedrank.client.secagg import send_secure
from fedrank.client.user_ledger import (
    MAX_NOISE_MULTIPLIER,
    MIN_LOCAL_EPSILON,
    PrivacyBudgetError,
    UserLedger,
)
from fedrank.core.message import MessageBatch
from fedrank.errors import FedrankError
from fedrank.privacy.accounting import (
    PLD_DISCRETIZATION,
    gaussian_epsilon,
    gaussian_noise_multiplier,
)
from fedrank.privacy.skellam import sensitivities, skellam_epsilon
from fedrank.systems.frecency.client import FrecencyClient
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.wire import FrecencyWire
from tests.cli.clirun import assert_clean_failure, ok, run
from tests.server.serverkit import ADMIN_TOKEN, admin, issue_tokens, live_server, status
from tests.server.test_server_privacy import DELTA, EPSILON, ROUNDS, TOML


def _kinds(ledger: UserLedger) -> list[tuple[str, float]]:
    """The recorded rounds as ``(mechanism, value)``."""
    return [(e.mechanism, e.value) for e in ledger.events()]


def _direct(multipliers: list[float], delta: float) -> float:
    accountant = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    for z in multipliers:
        accountant.compose(dp_accounting.GaussianDpEvent(z))
    return float(accountant.get_epsilon(delta))


def test_epsilon_composes_only_the_users_rounds(tmp_path: Path) -> None:
    ledger = UserLedger(tmp_path, budget=10.0)
    assert ledger.epsilon() == 0.0
    eps = [ledger.admit("s", r, 5.0) for r in (0, 3, 7)]  # 3 of perhaps 10 rounds
    assert eps[-1] == pytest.approx(gaussian_epsilon(5.0, 1e-6, 3), rel=1e-5)
    ledger.admit("other", 0, 2.0)  # another server, another noise: composed too
    # the ledger composes distributions, the accountant events: the same up to discretization
    assert ledger.epsilon() == pytest.approx(_direct([5.0, 5.0, 5.0, 2.0], 1e-6), rel=1e-5)
    ledger.close()
    reopened = UserLedger(tmp_path, budget=10.0)  # the ledger survives the client
    assert sorted(_kinds(reopened)) == [("gaussian", 2.0)] + [("gaussian", 5.0)] * 3


def test_the_ledger_refuses_a_second_update_in_a_round_and_rounds_past_the_budget() -> None:
    ledger = UserLedger(None, budget=gaussian_epsilon(4.0, 1e-6, 2) * 1.0001)
    ledger.admit("s", 0, 4.0)
    with pytest.raises(PrivacyBudgetError, match="already sent an update in round 0"):
        ledger.admit("s", 0, 4.0)
    ledger.admit("s", 1, 4.0)
    with pytest.raises(PrivacyBudgetError, match="over its budget"):
        ledger.admit("s", 2, 4.0)
    assert len(ledger.events()) == 2  # the refused round is not recorded
    with pytest.raises(FedrankError, match="budget must be > 0"):
        UserLedger(None, budget=0.0)


def test_local_rounds_compose_as_binary_randomized_response(tmp_path: Path) -> None:
    """A local epsilon-DP message is accounted as binary randomized response with that
    epsilon: one message costs its epsilon, many cost less than their sum (the sum is what
    the server's basic-composition status says), and they compose with Gaussian rounds."""
    ledger = UserLedger(tmp_path, budget=100.0)
    one = ledger.admit_local("s", 0, 0.1)
    assert 0.099 < one <= 0.1 + 1e-3
    for r in range(1, 100):
        hundred = ledger.admit_local("s", r, 0.1)
    assert 3.0 < hundred < 7.0  # well below the basic composition's 10
    ledger.admit("other", 0, 2.0)
    rr = pld_of.from_randomized_response(
        2 / (math.exp(0.1) + 1), 2, value_discretization_interval=PLD_DISCRETIZATION
    )
    gauss = pld_of.from_gaussian_mechanism(2.0, value_discretization_interval=PLD_DISCRETIZATION)
    direct = rr.self_compose(100).compose(gauss).get_epsilon_for_delta(1e-6)
    assert ledger.epsilon() == pytest.approx(direct, rel=1e-6)
    assert ledger.epsilon() > max(hundred, gaussian_epsilon(2.0, 1e-6, 1))
    with pytest.raises(FedrankError, match="epsilon per message must be a finite number"):
        ledger.admit_local("s", 99, math.inf)
    with pytest.raises(PrivacyBudgetError, match="over this user's whole budget"):
        ledger.admit_local("s", 99, 5000.0)  # e^5000 would overflow; refused up front
    big = UserLedger(None, budget=2000.0)  # large epsilons add up as they are
    assert big.admit_local("s", 0, 800.0) == 800.0
    assert big.admit("s", 1, 2.0) == pytest.approx(800.0 + gaussian_epsilon(2.0, 1e-6, 1), rel=1e-5)


def test_what_a_server_announces_is_bounded() -> None:
    """A server chooses the noise multiplier and epsilon the ledger accounts: a tiny
    multiplier (whose loss distribution would take all memory) is refused, a huge one is
    accounted at the bound (less noise: an upper bound), a vanishing local epsilon at its
    floor (randomized response cannot be built for it); none raises anything else."""
    ledger = UserLedger(None, budget=10.0)
    for tiny in (1e-3, 1e-300):
        with pytest.raises(PrivacyBudgetError, match="below 0.1"):
            ledger.admit("s", 0, tiny)
    assert 0 < ledger.admit("s", 0, 1e308) < 1e-2
    assert ledger.events()[0].value == MAX_NOISE_MULTIPLIER
    assert 0 < ledger.admit_local("s", 1, 1e-300) < 1e-2
    assert ledger.events()[1].value == MIN_LOCAL_EPSILON


def test_a_gaussian_only_ledger_is_carried_over(tmp_path: Path) -> None:
    """A ledger written before local mechanisms were accounted (table ``rounds``) keeps its
    rounds: the user's past spending is not forgotten."""
    with sqlite3.connect(tmp_path / "privacy.sqlite3") as db:
        db.execute(
            "CREATE TABLE rounds (server TEXT NOT NULL, round INTEGER NOT NULL, "
            "noise_multiplier REAL NOT NULL, PRIMARY KEY (server, round))"
        )
        db.executemany("INSERT INTO rounds VALUES (?, ?, ?)", [("s", 0, 4.0), ("s", 1, 4.0)])
    ledger = UserLedger(tmp_path, budget=100.0)
    assert _kinds(ledger) == [("gaussian", 4.0), ("gaussian", 4.0)]
    assert ledger.epsilon() == pytest.approx(gaussian_epsilon(4.0, 1e-6, 2), rel=1e-6)
    with pytest.raises(PrivacyBudgetError, match="already sent an update in round 1"):
        ledger.admit_local("s", 1, 1.0)
    ledger.close()
    assert _kinds(UserLedger(tmp_path, budget=100.0)) == [("gaussian", 4.0)] * 2


def test_the_sdk_sends_only_what_the_users_budget_admits(tmp_path: Path) -> None:
    """The server's budget covers two iterations; this user's own covers one."""
    z = gaussian_noise_multiplier(EPSILON, DELTA, ROUNDS)
    budget = gaussian_epsilon(z, DELTA, 1) * 1.0001
    update = {"delta": [0.1] * 6, "n": 1}
    with live_server(tmp_path, TOML) as live:
        url = live.process.url
        (token,) = issue_tokens(live.store, 1)  # [privacy]: an enrolled device
        user = tmp_path / "user"
        with Client(url, state_dir=user, privacy_budget=budget, enrollment_token=token) as client:
            assert client.send(update, 0).status == "accepted"
            with pytest.raises(PrivacyBudgetError, match="already sent"):
                client.send(update, 0)
            assert admin(live.client, "close").status_code == 200
            with pytest.raises(PrivacyBudgetError, match="over its budget"):
                client.send(update, 1)
            assert client.send({}, 1, metrics={"loss": 1.0}).status == "accepted"  # a ping
            assert client.queued() == []
        assert status(live.client)["updates_accepted_total"] == 2  # 1 update, 1 ping
        assert status(live.client)["privacy"]["budget_spent"] is False  # the server's is not
        with (
            Client(url, state_dir=tmp_path / "user", privacy_budget=budget) as again,
            pytest.raises(PrivacyBudgetError, match="over its budget"),
        ):
            again.send(update, 1)  # the ledger is on disk


SIGN_TOML = f"""
[server]
workload = "frecency"
admin_token = "{ADMIN_TOKEN}"
[iteration]
seconds = 0.0
min_updates = 1000000000
[frecency]
message = "sign"
sign_epsilon = 0.5
[[branches]]
name = "treatment"
share = 1.0
"""


def test_the_sdk_accounts_randomized_signs_per_message(tmp_path: Path) -> None:
    """A frecency server with randomized signs announces 22 x 0.5 = 11 per message; a user
    whose budget covers one message sends one, and the second round is refused. A device
    that says what it applied (``local_epsilon``) is accounted by its own figure; a
    budgeted client does not forward batches."""
    config = FrecencyConfig(message="sign", sign_epsilon=0.5)
    client_half = FrecencyClient(config)
    assert client_half.message_epsilon() == pytest.approx(11.0)
    rng = np.random.default_rng(0)
    signs = client_half.privatize(rng.normal(size=(1, 22)), rng)
    (payload,) = FrecencyWire(config, 100).encode(MessageBatch.of_vectors(signs, np.array([3])))
    with live_server(tmp_path, SIGN_TOML) as live:
        assert status(live.client)["privacy"]["per_message"]["epsilon"] == pytest.approx(11.0)
        with Client(live.process.url, privacy_budget=11.01, rng=rng) as client:
            assert client.send(payload, 0).status == "accepted"
            assert client.ledger is not None
            assert _kinds(client.ledger) == [("pure", pytest.approx(11.0))]
            assert admin(live.client, "close").status_code == 200
            with pytest.raises(PrivacyBudgetError, match="over its budget"):
                client.send(payload, 1)
        with Client(live.process.url, privacy_budget=100.0, rng=rng) as own:
            assert own.send(payload, 1, local_epsilon=5.5).status == "accepted"
            assert own.ledger is not None and _kinds(own.ledger) == [("pure", 5.5)]
            with pytest.raises(PrivacyBudgetError, match="cannot account"):
                own.send_batch(MessageBatch.of_vectors(np.ones((2, 22)), np.ones(2)), 1)
        assert status(live.client)["updates_accepted_total"] == 2


def test_fedrank_client_keeps_the_users_budget(tmp_path: Path, firefox_dir: Path) -> None:
    """``fedrank client --privacy-budget``: the real profile's update goes out once per
    round while it fits; the same round again is refused with the reason, nothing sent."""
    args = ["client", "--server", "", "--places", str(firefox_dir / "places.sqlite"),
            "--state", str(tmp_path / "state"), "--privacy-budget", "12"]  # fmt: skip
    with live_server(tmp_path, SIGN_TOML) as live:
        args[2] = live.process.url
        first = ok(args)
        assert "update -> accepted" in first.output
        assert_clean_failure(run(args), "already sent an update in round 0")
        assert status(live.client)["updates_accepted_total"] == 1
    ledger = UserLedger(tmp_path / "state", budget=12.0)
    assert _kinds(ledger) == [("pure", pytest.approx(11.0))]


def test_a_budget_refuses_a_server_without_central_dp(tmp_path: Path) -> None:
    with live_server(tmp_path, '[server]\nworkload = "fedavg"\n[fedavg]\ndim = 3\n') as live:
        with (
            Client(live.process.url, privacy_budget=1.0, rng=np.random.default_rng(0)) as c,
            pytest.raises(PrivacyBudgetError, match="announces 'none'"),
        ):
            c.send({"delta": [0.1, 0.2, 0.3], "n": 1}, 0)
        assert status(live.client)["updates_accepted_total"] == 0


def test_skellam_rounds_compose_by_renyi_dp_and_with_the_others(tmp_path: Path) -> None:
    """Secure rounds with distributed noise: their Renyi DP adds up (the plan's own
    accounting), and beside PLD rounds each part takes half of delta."""
    l1, l2 = sensitivities(4096.0, 1.0, 6)
    ledger = UserLedger(tmp_path, budget=100.0)
    for r in range(3):
        ledger.admit_skellam("s", r, 4e7, l1, l2)
    assert ledger.epsilon() == pytest.approx(skellam_epsilon(4e7, l1, l2, 3, 1e-6), rel=1e-9)
    ledger.admit("other", 0, 3.0)
    both = skellam_epsilon(4e7, l1, l2, 3, 5e-7) + gaussian_epsilon(3.0, 5e-7, 1)
    assert ledger.epsilon() == pytest.approx(both, rel=1e-5)
    assert ledger.events()[0] == ("skellam", 4e7, l1, l2)
    with pytest.raises(FedrankError, match="l2 must be a finite number"):
        ledger.admit_skellam("s", 9, 4e7, l1, 0.0)


def test_a_budget_refuses_a_secure_round_without_noise() -> None:
    """Secure aggregation alone is not DP: a budgeted client does not send in such a round."""
    block = {"session": base64.b64encode(b"x" * 32).decode(), "id": 1, "threshold": 2,
             "dimension": 3, "scale": 1024.0, "max_clients": 4, "l2_bound": 1.0,
             "noise_variance": 0.0}  # fmt: skip
    checkin = Checkin("c", True, 0, model_version=0, secagg=block)
    with (
        Client("http://127.0.0.1:9", privacy_budget=1.0) as c,
        pytest.raises(PrivacyBudgetError, match="adds no distributed noise"),
    ):
        send_secure(c, checkin, np.zeros(3))
