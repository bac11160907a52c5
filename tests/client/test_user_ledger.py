"""The user's own privacy ledger (:mod:`fedrank.client.user_ledger`): its epsilon is the PLD
composition of exactly the rounds the user took part in (``dp_accounting`` called
directly), it refuses a second update in a round and any round past the user's budget, it
survives a restart of the client, and through the SDK it stops updates to a real server over
loopback before anything is sent."""

from __future__ import annotations

from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld

from fedrank.client import Client
from fedrank.client.user_ledger import PrivacyBudgetError, UserLedger
from fedrank.errors import FedrankError
from fedrank.privacy.accounting import (
    PLD_DISCRETIZATION,
    gaussian_epsilon,
    gaussian_noise_multiplier,
)
from tests.server.serverkit import admin, live_server, status
from tests.server.test_server_privacy import DELTA, EPSILON, ROUNDS, TOML


def _direct(multipliers: list[float], delta: float) -> float:
    accountant = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    for z in multipliers:
        accountant.compose(dp_accounting.GaussianDpEvent(z))
    return float(accountant.get_epsilon(delta))


def test_epsilon_composes_only_the_users_rounds(tmp_path: Path) -> None:
    ledger = UserLedger(tmp_path, budget=10.0)
    assert ledger.epsilon() == 0.0
    eps = [ledger.admit("s", r, 5.0) for r in (0, 3, 7)]  # 3 of perhaps 10 rounds
    assert eps[-1] == pytest.approx(gaussian_epsilon(5.0, 1e-6, 3), rel=1e-6)
    ledger.admit("other", 0, 2.0)  # another server, another noise: composed too
    assert ledger.epsilon() == pytest.approx(_direct([5.0, 5.0, 5.0, 2.0], 1e-6), rel=1e-6)
    ledger.close()
    reopened = UserLedger(tmp_path, budget=10.0)  # the ledger survives the client
    assert reopened.multipliers() == [5.0, 5.0, 5.0, 2.0]


def test_the_ledger_refuses_a_second_update_in_a_round_and_rounds_past_the_budget() -> None:
    ledger = UserLedger(None, budget=gaussian_epsilon(4.0, 1e-6, 2) * 1.0001)
    ledger.admit("s", 0, 4.0)
    with pytest.raises(PrivacyBudgetError, match="already sent an update in round 0"):
        ledger.admit("s", 0, 4.0)
    ledger.admit("s", 1, 4.0)
    with pytest.raises(PrivacyBudgetError, match="over its budget"):
        ledger.admit("s", 2, 4.0)
    assert len(ledger.multipliers()) == 2  # the refused round is not recorded
    with pytest.raises(FedrankError, match="budget must be > 0"):
        UserLedger(None, budget=0.0)


def test_the_sdk_sends_only_what_the_users_budget_admits(tmp_path: Path) -> None:
    """The server's budget covers two iterations; this user's own covers one."""
    z = gaussian_noise_multiplier(EPSILON, DELTA, ROUNDS)
    budget = gaussian_epsilon(z, DELTA, 1) * 1.0001
    update = {"delta": [0.1] * 6, "n": 1}
    with live_server(tmp_path, TOML) as live:
        url = live.process.url
        with Client(url, state_dir=tmp_path / "user", privacy_budget=budget) as client:
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


def test_a_budget_refuses_a_server_without_central_dp(tmp_path: Path) -> None:
    with live_server(tmp_path, '[server]\nworkload = "fedavg"\n[fedavg]\ndim = 3\n') as live:
        with (
            Client(live.process.url, privacy_budget=1.0, rng=np.random.default_rng(0)) as c,
            pytest.raises(PrivacyBudgetError, match="announces 'none'"),
        ):
            c.send({"delta": [0.1, 0.2, 0.3], "n": 1}, 0)
        assert status(live.client)["updates_accepted_total"] == 0
