"""Central differential privacy in the server (``[privacy]``, :mod:`fedrank.server.privacy`,
docs/privacy.md "In the server"): a real server over loopback clips every update, adds the
calibrated noise at each close (the same model as :class:`~fedrank.strategies.dp.DPStrategy`
in process with the same noise), reports each user's epsilon in ``/v1/status`` as
``dp_accounting`` computes it independently, and refuses updates, check-ins and closes once
the budget is spent, for good (also after a restart). A store trained under one budget does
not continue under another."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

import dp_accounting
import numpy as np
import orjson
import pytest
from dp_accounting import pld

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.privacy.accounting import (
    PLD_DISCRETIZATION,
    gaussian_noise_multiplier,
    randomized_response_message_epsilon,
)
from fedrank.privacy.adaptive_clip import AdaptiveClip
from fedrank.privacy.discrete_gaussian import KeyStream, LatticeGaussian, noise_key
from fedrank.server.engine import Engine
from fedrank.server.messages import Incoming, Outcome
from fedrank.server.privacy import PrivacyLedger, report_config
from fedrank.server.store import Store
from fedrank.server.workloads import make_workload
from fedrank.strategies.dp import DPStrategy
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from tests.server.serverkit import (
    ADMIN,
    ADMIN_TOKEN,
    PROXIES_TOML,
    admin,
    assert_error,
    live_server,
    offline_config,
    prometheus,
    state_of,
    status,
)

EPSILON, DELTA, CLIP, ROUNDS, NOISE_SEED = 2.0, 1e-6, 0.5, 2, 7
TOML = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[iteration]
seconds = 0.0
min_updates = 1000000000  # only the test's admin closes close (a tick could close mid-round)
[fedavg]
dim = 6
server_learning_rate = 1.0
[privacy]
epsilon = {EPSILON}
delta = {DELTA}
clip = {CLIP}
rounds = {ROUNDS}
noise_seed = {NOISE_SEED}
"""


def _independent_epsilon(z: float, rounds: int) -> float:
    """``dp_accounting`` called directly: ``rounds`` Gaussian mechanisms of multiplier ``z``."""
    accountant = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds)
    return float(accountant.compose(event).get_epsilon(DELTA))


def _deltas(seed: int, count: int) -> np.ndarray:
    """Rows of norm 0.1 to 3: some within the clip, some far beyond it."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(count, 6))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) * rng.uniform(0.1, 3.0, (count, 1))


def test_under_privacy_only_the_admin_token_sees_the_exact_counts(tmp_path: Path) -> None:
    """Polled, an iteration's count of updates tells whether a user just took part (the
    fixed denominator hides it in the model): under ``[privacy]`` the counts of
    ``/v1/status``, ``/v1/summary`` and ``/metrics`` need the admin token, unless
    ``public_counts`` says otherwise; the privacy block stays public (the SDK's ledger)."""
    with live_server(tmp_path / "private", TOML) as live:
        client = live.client
        body = {"message_id": "m1", "model_version": 0, "payload": {"delta": [0.1] * 6, "n": 1}}
        assert client.post("/v1/updates", json=body).status_code == 202
        public = client.get("/v1/status").json()
        assert public["counts_withheld"] is True
        assert public["updates_in_iteration"] is None and public["updates_accepted_total"] is None
        assert public["privacy"]["mechanism"].startswith("gaussian")
        for path in ("/v1/summary", "/metrics"):
            assert_error(client.get(path), 403, "counts_withheld", "admin token")
            wrong = {"Authorization": "Bearer not-the-token-at-all"}
            assert_error(client.get(path, headers=wrong), 403, "counts_withheld")
            assert client.get(path, headers=ADMIN).status_code == 200
        operator = status(client)  # with the token
        assert operator["counts_withheld"] is False and operator["updates_in_iteration"] == 1
    open_toml = TOML + "public_counts = true\n"
    with live_server(tmp_path / "public", open_toml) as live:
        public = live.client.get("/v1/status").json()
        assert public["counts_withheld"] is False and public["updates_in_iteration"] == 0
        assert live.client.get("/v1/summary").status_code == 200
        assert live.client.get("/metrics").status_code == 200


def test_a_private_server_noises_each_close_reports_epsilon_and_stops_at_the_budget(
    tmp_path: Path,
) -> None:
    config = offline_config(TOML, tmp_path)
    z = gaussian_noise_multiplier(EPSILON, DELTA, ROUNDS)
    updates = [_deltas(1, 5), _deltas(2, 4)]
    with live_server(tmp_path, TOML) as live:
        client = live.client
        first = status(client)["privacy"]
        assert first["mechanism"] == "gaussian (central)" and first["epsilon"] == 0.0
        assert first["budget"] == {"epsilon": EPSILON, "delta": DELTA, "rounds": ROUNDS}
        assert first["noise_multiplier"] == pytest.approx(z) and first["clip"] == CLIP
        assert first["budget_spent"] is False and first["sampling_rate"] == 1.0
        params = [np.array(client.get("/v1/model").json()["params"])]
        epsilons = []
        for k, rows in enumerate(updates):
            for i, row in enumerate(rows):  # weights n differ: DP ignores them
                body = {
                    "message_id": f"u{k}-{i}",
                    "model_version": k,
                    "client_id": f"user-{i}",  # a device each: one update per iteration
                    "payload": {"delta": row.tolist(), "n": 1 + 10 * i},
                }
                assert client.post("/v1/updates", json=body).status_code == 202
            assert admin(client, "close").status_code == 200
            params.append(np.array(client.get("/v1/model").json()["params"]))
            epsilons.append(status(client)["privacy"]["epsilon"])
        last = status(client)["privacy"]
        metrics = prometheus(client.get("/metrics", headers=ADMIN).text)
        # Spent: updates, closes and the admin's close are refused, nothing changes.
        before = state_of(client)
        body = {"message_id": "late", "model_version": ROUNDS, "payload": {"delta": [0.0] * 6}}
        assert_error(client.post("/v1/updates", json=body), 403, "privacy_budget_spent")
        assert_error(admin(client, "close"), 403, "privacy_budget_spent", "budget is spent")
        assert state_of(client) == before
    # Each close is DPStrategy's step with the noise of default_rng([seed, iteration]).
    for k, rows in enumerate(updates):
        dp = DPStrategy(
            FedAvgStrategy(config.sections["fedavg"]), z, CLIP, np.random.default_rng([7, k])
        )
        state = dp.accumulate(dp.zero(), MessageBatch.of_vectors(rows, np.ones(len(rows))))
        step = dp.server_step(state, params[k], dp.init(params[k]))
        np.testing.assert_allclose(params[k + 1], step.params, rtol=0, atol=1e-12)
        clipped_mean = np.mean(
            rows * np.minimum(1.0, CLIP / np.linalg.norm(rows, axis=1))[:, None], axis=0
        )
        assert not np.allclose(params[k + 1] - params[k], clipped_mean)  # noise was added
    # The reported epsilon is dp_accounting's, and the budget holds.
    assert epsilons == pytest.approx([_independent_epsilon(z, 1), _independent_epsilon(z, 2)])
    assert epsilons[0] < epsilons[1] <= EPSILON
    assert last["budget_spent"] is True and last["rounds"] == ROUNDS
    assert metrics["fedrank_privacy_epsilon"] == pytest.approx(epsilons[1])


def test_the_budget_survives_a_restart_and_binds_the_store(tmp_path: Path) -> None:
    config = offline_config(TOML, tmp_path, store=str(tmp_path / "store"))
    bigger = offline_config(
        TOML.replace(f"rounds = {ROUNDS}", "rounds = 5"), tmp_path, store=str(tmp_path / "store")
    )

    async def scenario() -> tuple[list[int], bool, str]:
        engine = Engine(config, asyncio.get_running_loop())
        statuses = []
        try:
            for _ in range(ROUNDS + 1):
                if not engine.snapshot().budget_spent:  # the app refuses updates after it
                    await engine.writer.submit([_incoming(engine, f"m{engine.current.number}")])
                statuses.append(
                    (await engine.writer.command("close", reason="t", force=True)).status
                )
        finally:
            engine.stop()
        restarted = Engine(config, asyncio.get_running_loop())
        try:
            spent = restarted.snapshot().budget_spent
        finally:
            restarted.stop()
        with pytest.raises(ConfigError) as err:
            Engine(bigger, asyncio.get_running_loop())
        return statuses, spent, str(err.value)

    statuses, spent, error = asyncio.run(scenario())
    assert statuses == [200] * ROUNDS + [403]
    assert spent is True
    assert "was created for" in error and '"rounds": 2' in error


ADAPTIVE = TOML.replace(
    f"noise_seed = {NOISE_SEED}\n", "clip_quantile = 0.5\ncount_noise = 5.0\n"
).replace(f"rounds = {ROUNDS}", "rounds = 4")


def test_the_adaptive_clip_follows_the_norms_privately_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    """``clip_quantile``: each close adds the budget's noise (split between the updates and
    the count of updates within the clip) and moves the clip; every close equals
    ``DPStrategy`` with the adaptive clip in process, with the noise drawn from the store's
    secret; a restarted server continues with the same clip (it replays the closed round's
    count noise, it does not draw new)."""
    store = tmp_path / "store"
    config = offline_config(ADAPTIVE, tmp_path, store=str(store))
    updates = [_deltas(10 + k, 6) for k in range(3)]

    async def scenario() -> tuple[list[float], list[np.ndarray], float, dict[str, object]]:
        engine = Engine(config, asyncio.get_running_loop())
        clips, params = [engine.privacy.current_clip], [engine.round.params]
        try:
            for k, rows in enumerate(updates):
                batch = [_incoming(engine, f"m{k}-{i}", row) for i, row in enumerate(rows)]
                await engine.writer.submit(batch)
                assert (await engine.writer.command("close", reason="t", force=True)).status == 200
                clips.append(engine.privacy.current_clip)
                params.append(engine.round.params)
            status = engine.privacy.status(engine.current.number)
        finally:
            engine.stop()
        restarted = Engine(config, asyncio.get_running_loop())
        try:
            clip_after_restart = restarted.round.aggregate.bound
        finally:
            restarted.stop()
        return clips, params, clip_after_restart, status

    clips, params, clip_after_restart, status = asyncio.run(scenario())
    assert clip_after_restart == clips[-1]
    assert status["clip_current"] == clips[-1] and status["clip"] == CLIP
    assert len(set(clips)) == len(clips)  # the clip moved at every close
    # The same closes in process, with the store's secret as the noise seed.
    opened = Store(store)
    try:
        secret = opened.noise_secret()
    finally:
        opened.close()
    z = gaussian_noise_multiplier(EPSILON, DELTA, 4)
    dp = DPStrategy(
        FedAvgStrategy(config.sections["fedavg"]),
        z,
        CLIP,
        np.random.default_rng(),
        AdaptiveClip(0.5, 5.0),
    )
    state, opt_state = dp.zero(), dp.init(params[0])
    for k, rows in enumerate(updates):
        dp.use_rng(np.random.default_rng([secret, k]), np.random.default_rng([secret, k, 1]))
        state = dp.accumulate(state, MessageBatch.of_vectors(rows, np.ones(len(rows))))
        step = dp.server_step(state, params[k], opt_state)
        np.testing.assert_allclose(params[k + 1], step.params, rtol=0, atol=1e-12)
        opt_state, state = step.opt_state, dp.next_zero(state)
        assert state.bound == clips[k + 1]
    assert "adaptive clip" in " ".join(report_config(config, None)[0].notes)


def test_a_fixed_denominator_divides_every_close_by_it(tmp_path: Path) -> None:
    """``[privacy] denominator = 10``: each close is DPStrategy's step with that fixed
    denominator (5 updates, divided by 10, not 5), and the status says what it protects."""
    text = TOML + "denominator = 10.0\n"
    config = offline_config(text, tmp_path)
    z = gaussian_noise_multiplier(EPSILON, DELTA, ROUNDS)
    rows = _deltas(3, 5)
    with live_server(tmp_path, text) as live:
        client = live.client
        before = np.array(client.get("/v1/model").json()["params"])
        for i, row in enumerate(rows):
            body = {
                "message_id": f"d{i}",
                "model_version": 0,
                "client_id": f"user-{i}",  # a device each: one update per iteration
                "payload": {"delta": row.tolist(), "n": 1},
            }
            assert client.post("/v1/updates", json=body).status_code == 202
        assert admin(client, "close").status_code == 200
        after = np.array(client.get("/v1/model").json()["params"])
        privacy = status(client)["privacy"]
    dp = DPStrategy(
        FedAvgStrategy(config.sections["fedavg"]),
        z,
        CLIP,
        np.random.default_rng([7, 0]),
        denominator=10.0,
    )
    state = dp.accumulate(dp.zero(), MessageBatch.of_vectors(rows, np.ones(len(rows))))
    np.testing.assert_allclose(after, dp.server_step(state, before, dp.init(before)).params)
    by_count = DPStrategy(
        FedAvgStrategy(config.sections["fedavg"]), z, CLIP, np.random.default_rng([7, 0])
    )
    state = by_count.accumulate(by_count.zero(), MessageBatch.of_vectors(rows, np.ones(5)))
    assert not np.allclose(after, by_count.server_step(state, before, dp.init(before)).params)
    report = report_config(config, 1)[0]
    assert report.parameters["denominator"] == 10.0
    assert any("fixed denominator 10" in note for note in report.notes)
    assert privacy["epsilon"] == pytest.approx(report.per_user["epsilon"])
    with pytest.raises(ConfigError, match="denominator is central DP's"):
        offline_config(text.replace("[privacy]\n", '[privacy]\nmode = "distributed"\n'), tmp_path)


def test_adaptive_clip_settings_that_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs count_noise"):
        offline_config(ADAPTIVE.replace("count_noise = 5.0\n", ""), tmp_path)
    with pytest.raises(ConfigError, match=re.escape("clip_quantile (0: a fixed clip) must be in")):
        offline_config(ADAPTIVE.replace("clip_quantile = 0.5", "clip_quantile = 1.5"), tmp_path)
    with pytest.raises(ConfigError, match="belongs to the adaptive clip"):
        offline_config(ADAPTIVE.replace("clip_quantile = 0.5\n", ""), tmp_path)
    small = offline_config(ADAPTIVE.replace("count_noise = 5.0", "count_noise = 0.5"), tmp_path)
    with pytest.raises(ConfigError, match="count noise sigma_b = 0.5 is too small"):
        make_workload(small, PrivacyLedger(small).wrap)


def _incoming(
    engine: Engine, message_id: str, delta: np.ndarray | None = None, client: str | None = None
) -> Incoming:
    payload = {"delta": [0.1] * 6 if delta is None else delta.tolist(), "n": 1}
    parsed = engine.workload.wire.parse(payload)
    text = orjson.dumps(payload).decode()
    return Incoming(
        message_id, engine.round.version, "treatment", "update", text, {}, parsed=parsed,
        client=client,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('[server]\nworkload = "foltr-es"\n', "randomized response"),
        ("[privacy]\nepsilon = 1.0\nrounds = 10\n", "clip"),
        ("[privacy]\nepsilon = 1.0\nclip = 1.0\n", "rounds"),
        ("[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\ndelta = 1.0\n", "delta"),
        (
            "[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\naccountant = 'x'\n",
            "accountant must be one of pld, rdp",
        ),
        ("[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\nnoise_seed = -2\n", "noise_seed"),
        (PROXIES_TOML, "proxies"),
        ("[iteration]\nstable_ticks = 3\n", "stable_ticks"),
        ("[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\nbudget = 3\n", "unknown key"),
        ("[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\ndenominator = -1\n", "denominator"),
        ("[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\ndenominator = inf\n", "denominator"),
        ("[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\ndenominator = 0.5\n", "denominator"),
    ],
)
def test_privacy_configurations_that_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    base = "[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\n"
    text = extra if extra.startswith("[privacy]") else base + extra
    with pytest.raises(ConfigError, match=message):
        offline_config(text, tmp_path)


def test_a_robust_aggregator_cannot_be_made_private(tmp_path: Path) -> None:
    text = "[frecency]\naggregator = 'median'\n[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\n"
    config = offline_config(text, tmp_path)
    with pytest.raises(ConfigError, match="robust statistic"):
        make_workload(config, PrivacyLedger(config).wrap)


def test_status_without_central_dp(tmp_path: Path) -> None:
    """No ``[privacy]``: frecency and FedAvg report no mechanism; FOLtR-ES its randomized
    response, per message and over the closed rounds (one message per round and user)."""
    frecency = PrivacyLedger(offline_config(None, tmp_path)).status(3)
    assert frecency["mechanism"] == "none" and frecency["epsilon"] is None
    assert frecency["budget"] is None and frecency["budget_spent"] is False
    es = offline_config('[server]\nworkload = "foltr-es"\n[foltr_es]\np = 0.8\n', tmp_path)
    per_message = randomized_response_message_epsilon(0.8, 11, es.sections["foltr_es"].batch)
    ledger = PrivacyLedger(es)
    assert ledger.status(0)["epsilon"] == 0.0
    three = ledger.status(3)
    assert three["mechanism"] == "randomized response (local)"
    assert math.isclose(three["epsilon"], 3 * per_message)
    assert math.isclose(three["per_message"]["epsilon"], per_message)


def test_status_of_randomized_sign_messages(tmp_path: Path) -> None:
    """``[frecency] message = "sign"`` with ``sign_epsilon``: local DP, 22 signs a message."""
    text = '[frecency]\nmessage = "sign"\nsign_epsilon = 0.5\n'
    ledger = PrivacyLedger(offline_config(text, tmp_path))
    three = ledger.status(3)
    assert three["mechanism"] == "randomized response on signs (local)"
    assert math.isclose(three["per_message"]["epsilon"], 22 * 0.5)
    assert math.isclose(three["epsilon"], 3 * 22 * 0.5) and three["rounds"] == 3


def test_a_device_contributes_one_update_per_iteration_and_its_spend_is_counted(
    tmp_path: Path,
) -> None:
    """Issue 51, finding 10: one device sending 20 updates in one iteration (singly, then
    as a JSON batch) gets one counted, the others 409 ``one_update_per_iteration``; the
    ledger counts per device the closes it contributed to (from the store: a restart keeps
    it), ``/v1/status`` reports the largest spend and the devices at the budget, never which;
    a device at its budget is refused with its spend named."""

    def update(k: int, i: int, device: str, version: int) -> dict[str, object]:
        return {"message_id": f"d{k}-{i}", "model_version": version, "client_id": device,
                "payload": {"delta": [0.05 * (i % 5)] * 6, "n": 1}}  # fmt: skip

    with live_server(tmp_path, TOML) as live:
        client = live.client
        answers = [client.post("/v1/updates", json=update(0, i, "dev-a", 0)) for i in range(20)]
        assert [a.status_code for a in answers] == [202] + [409] * 19
        assert_error(answers[1], 409, "one_update_per_iteration", live.device_id("dev-a"))
        batch = {"messages": [update(1, i, "dev-b", 0) for i in range(20)]}
        result = client.post("/v1/updates:batch", json=batch).json()
        assert result["accepted"] == 1 and result["statuses"] == [202] + [409] * 19
        assert status(client)["updates_in_iteration"] == 2
        assert admin(client, "close").status_code == 200
        devices = status(client)["privacy"]["devices"]
        assert devices == {
            "max_iterations": 1,
            "max_epsilon": pytest.approx(status(client)["privacy"]["epsilon"]),
            "at_budget": 0,
        }
        assert live.device_id("dev-a") not in client.get("/v1/status").text
        assert client.post("/v1/updates", json=update(2, 0, "dev-a", 1)).status_code == 202
        # A restart (the same devices) counts the same from the store; after the second
        # close dev-a is at budget.
        live.process.stop()
        live.process.start()
        assert_error(
            client.post("/v1/updates", json=update(2, 1, "dev-a", 1)),
            409,
            "one_update_per_iteration",
        )
        assert admin(client, "close").status_code == 200
        devices = status(client)["privacy"]["devices"]
        assert devices["max_iterations"] == ROUNDS and devices["at_budget"] == 1


def test_a_device_at_its_budget_is_refused_naming_its_spend(tmp_path: Path) -> None:
    config = offline_config(TOML, tmp_path, store=str(tmp_path / "store"))

    async def scenario() -> Outcome | None:
        engine = Engine(config, asyncio.get_running_loop())
        try:
            for k in range(ROUNDS):
                item = _incoming(engine, f"m{k}", client="dev-a")
                assert engine.privacy.client_refusal("dev-a") is None
                await engine.writer.submit([item])
                second = engine.privacy.client_refusal("dev-a")
                assert second is not None and second.status == 409
                assert engine.privacy.client_refusal("dev-b") is None
                closed = await engine.writer.command("close", reason="t", force=True)
                assert closed.status == 200
            return engine.privacy.client_refusal("dev-a")
        finally:
            engine.stop()

    refusal = asyncio.run(scenario())
    assert refusal is not None and refusal.status == 403
    assert refusal.body["error"] == "privacy_budget_spent"
    assert f"dev-a has contributed to {ROUNDS} closed iterations" in refusal.body["detail"]


SECURE = TOML.replace("[privacy]\n", '[privacy]\nnoise = "secure"\naccountant = "rdp"\n')


def test_secure_noise_end_to_end(tmp_path: Path) -> None:
    """``noise = "secure"``: each close is DPStrategy's step with the discrete Gaussian on
    the lattice, keyed by the seed and the iteration (the same bytes offline); the status
    reports the noise, the lattice and the Renyi epsilon of the budget's multiplier."""
    config = offline_config(SECURE, tmp_path)
    z = gaussian_noise_multiplier(EPSILON, DELTA, ROUNDS, accountant="rdp")
    updates = [_deltas(1, 5), _deltas(2, 4)]
    with live_server(tmp_path, SECURE) as live:
        client = live.client
        params = [np.array(client.get("/v1/model").json()["params"])]
        for k, rows in enumerate(updates):
            for i, row in enumerate(rows):
                body = {"message_id": f"s{k}-{i}", "model_version": k, "client_id": f"user-{i}",
                        "payload": {"delta": row.tolist(), "n": 1}}  # fmt: skip
                assert client.post("/v1/updates", json=body).status_code == 202
            assert admin(client, "close").status_code == 200
            params.append(np.array(client.get("/v1/model").json()["params"]))
        privacy = status(client)["privacy"]
    assert privacy["noise"] == "secure" and privacy["noise_multiplier"] == pytest.approx(z)
    mech = LatticeGaussian(CLIP, z, 6)
    assert privacy["lattice"]["lattice_step"] == pytest.approx(mech.step)
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(z), ROUNDS)
    assert privacy["epsilon"] == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-6)
    for k, rows in enumerate(updates):
        dp = DPStrategy(FedAvgStrategy(config.sections["fedavg"]), z, CLIP, 0)
        dp.use_rng(KeyStream(noise_key(NOISE_SEED, f"iteration {k}")))
        state = dp.accumulate(dp.zero(), MessageBatch.of_vectors(rows, np.ones(len(rows))))
        step = dp.server_step(state, params[k], dp.init(params[k]))
        assert params[k + 1].tobytes() == step.params.tobytes()
        clipped = rows * np.minimum(1.0, CLIP / np.linalg.norm(rows, axis=1))[:, None]
        lattice = (params[k + 1] - params[k]) * len(rows) / mech.step
        assert np.allclose(lattice, np.rint(lattice), atol=1e-6)  # the noised sum is on it
        assert not np.allclose(params[k + 1] - params[k], clipped.mean(axis=0))


def test_secure_noise_settings_that_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="accountant = 'rdp'"):
        offline_config(TOML.replace("[privacy]\n", '[privacy]\nnoise = "secure"\n'), tmp_path)
    with pytest.raises(ConfigError, match="drop clip_quantile"):
        offline_config(
            ADAPTIVE.replace("[privacy]\n", '[privacy]\nnoise = "secure"\naccountant = "rdp"\n'),
            tmp_path,
        )
    with pytest.raises(ConfigError, match="noise must be one of numpy, secure"):
        offline_config(TOML.replace("[privacy]\n", '[privacy]\nnoise = "os"\n'), tmp_path)
