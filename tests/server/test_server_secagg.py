"""Secure aggregation in the service (``[secagg]``; :mod:`fedrank.server.secagg_round`,
:mod:`fedrank.client.secagg`; docs/secagg.md "In the service"): 100 SDK clients over
loopback, 10 dropping out before their masked input and 30 after it, give the model of the
same (clipped) deltas aggregated in the clear, to the fixed-point precision; neither the
store directory nor the server's log holds any client's delta; plain updates are refused;
a client's bad messages are refused with the reason and change nothing."""

from __future__ import annotations

import base64
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
import uvicorn

from fedrank.client import Client
from fedrank.client.sdk import Checkin
from fedrank.client.secagg import SecureProxy, send_secure
from fedrank.errors import ConfigError, FedrankError
from fedrank.privacy.skellam import skellam_noise
from fedrank.secagg import signing, wire
from fedrank.secagg.client import SecAggClient
from fedrank.secagg.field import FixedPointEncoder
from fedrank.secagg.proxy import MaskedInputProxy
from fedrank.server.app import create_app
from fedrank.server.envelope import BadRequest
from fedrank.server.secagg_round import SecAggRound, noise_norm_bound
from fedrank.strategies.base import SafeguardError
from tests.server.serverkit import (
    assert_error,
    issue_tokens,
    live_server,
    offline_config,
    status,
    stored_rows,
    wait_until,
)

K, DIM, L2 = 100, 8, 1.0
TOML = f"""
[server]
workload = "fedavg"
max_connections_per_address = 1000  # every client polls from 127.0.0.1 at once
[iteration]
seconds = 0.0
[fedavg]
dim = {DIM}
[identity]
address_rate = 0             # every client of these tests shares the loopback address
[rounds]
enabled = true
clients_per_round = {K}
t_max_seconds = 120.0
checkin_seconds = 0.5
[secagg]
enabled = true
l2_bound = {L2}
stage_seconds = 12.0
"""
BEFORE_MASKED = range(0, 10)  # send keys, shares and the check, then drop: in U2 - U3
AFTER_MASKED = range(10, 40)  # send the masked input, then drop: in U3, not in U5


def _deltas() -> np.ndarray:
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(K, DIM))
    norms = rng.uniform(0.05, 1.6, size=(K, 1))  # about a third beyond the bound: clipped
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) * norms


def _client_run(url: str, token: str, i: int, delta: np.ndarray, drop: str | None = None) -> str:
    """SDK client ``i``, a device enrolled with ``token``: check in, run the secure round
    with ``delta`` (dropping out after the ``drop`` stage, if given); returns how its round
    ended."""
    with Client(url, rng=np.random.default_rng(i), enrollment_token=token) as client:
        checkin = client.checkin()
        assert checkin.selected and checkin.secagg is not None
        report = send_secure(client, checkin, delta, poll_seconds=0.05, drop_after=drop)
        return report.outcome or report.sent


def _drop(i: int) -> str | None:
    return "check_shares" if i in BEFORE_MASKED else "masked_input" if i in AFTER_MASKED else None


def _assert_step_is_the_clear_mean(step: np.ndarray, contributed: np.ndarray, k: int) -> None:
    """The published step is the unweighted mean of the contributors' clipped deltas, within
    the fixed-point bound of a cohort of ``k`` (about ``1 / (2 scale)`` per coordinate)."""
    encoder = FixedPointEncoder.with_max_scale(k, l2_bound=L2)
    clear = np.mean([encoder.clip(d) for d in contributed], axis=0)
    n = len(contributed)
    assert np.max(np.abs(step - clear)) <= encoder.error_bound(n) / n + 1e-15


def test_100_sdk_clients_with_dropouts_give_the_model_of_the_clear_aggregate(
    tmp_path: Path,
) -> None:
    deltas = _deltas()
    with live_server(tmp_path, TOML) as live:
        url = live.process.url
        params0 = np.array(live.client.get("/v1/model").json()["params"])
        plain = {"message_id": "m", "model_version": 0, "payload": {"delta": [0.0] * DIM, "n": 1}}
        assert_error(live.client.post("/v1/updates", json=plain), 403, "secure_aggregation_only")
        tokens = issue_tokens(live.store, K)
        with ThreadPoolExecutor(max_workers=K) as pool:
            outcomes = list(
                pool.map(lambda i: _client_run(url, tokens[i], i, deltas[i], _drop(i)), range(K))
            )
        # the close publishes version 1, then the scheduler opens the next round
        final = wait_until(
            lambda: (
                (s := status(live.client))["model_version"] == 1 and s["secagg"]["round"] == 1 and s
            ),
            timeout=60,
            what="the secure round's close and the next round",
        )
        params1 = np.array(live.client.get("/v1/model").json()["params"])
    assert outcomes.count("check_shares") == 10 and outcomes.count("masked_input") == 30
    assert outcomes.count("finished") == 60
    # The clear aggregate of the same updates: the contributors' (U3) clipped deltas,
    # unweighted, times the server learning rate 1 (within about 1 / (2 * 2**24) = 3e-8).
    contributors = [i for i in range(K) if i not in BEFORE_MASKED]
    step = params1 - params0
    _assert_step_is_the_clear_mean(step, deltas[contributors], K)
    assert not np.allclose(step, np.mean(deltas[contributors], axis=0))  # clipping mattered
    assert final["updates_accepted_total"] == 1 and final["updates_counted_total"] == 90
    assert final["secagg"] == {  # the next round, and how the first ended
        "round": 1, "stage": "advertise", "cohort": 0, "excluded": [], "reason": None,
        "previous": {"round": 0, "stage": "finished", "cohort": K, "excluded": [], "reason": None},
    }  # fmt: skip
    # Nothing of one client is stored or logged: one aggregate row; no delta's coordinates
    # (float64 or float32 bytes, or their JSON text) in any file of the store or the log.
    rows = stored_rows(live.store)
    assert [(r["kind"], r["count"]) for r in rows] == [("aggregate", 90)]
    audit = [pq.read_table(f).to_pylist() for f in live.store.rglob("*.parquet")]
    assert [r["kind"] for part in audit for r in part] == ["aggregate"]
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert live.process.log in files
    blob = b"".join(f.read_bytes() for f in files)
    for delta in deltas:
        for x in delta:
            assert struct.pack("<d", x) not in blob
            assert struct.pack("<f", x) not in blob
            assert repr(float(x))[:12].encode() not in blob


def test_a_round_refuses_bad_messages_and_aborts_below_the_threshold() -> None:
    sa = SecAggRound(0, DIM, 4, 3, L2, 1.0)
    block = sa.join("a", now=0.0)
    assert (block["id"], block["threshold"], block["dimension"]) == (1, 3, DIM)
    good = {"client_id": "a", "session": sa.session, "stage": "advertise"}
    cases = [
        ({"client_id": "a"}, 422, "invalid"),
        ({**good, "session": "AAAA", "message": {}}, 409, "secagg_wrong_session"),
        ({**good, "client_id": "stranger", "message": {}}, 403, "not_selected"),
        ({**good, "stage": "unmasking", "message": {}}, 409, "secagg_wrong_stage"),
        ({**good, "stage": "other", "message": {}}, 422, "invalid"),
        ({**good, "message": {"sender": 1}}, 422, "invalid_secagg_message"),
        (
            {
                **good,
                "message": {"sender": 2, "mask_public_key": "A" * 44, "share_public_key": "A" * 44},
            },
            422,
            "invalid_secagg_message",
        ),  # fmt: skip
    ]
    for body, status_code, code in cases:
        with pytest.raises(BadRequest) as err:
            sa.receive(body, now=0.1)
        assert (err.value.status, err.value.code) == (status_code, code), body
    assert sa.done == set() and sa.stage == 0
    sa.join("b", now=0.2)  # two of four check in, none advertises: the deadline passes
    sa.advance(now=0.5)
    assert sa.stage == 0 and sa.aborted is None  # before the deadline: still open
    sa.advance(now=5.0)
    assert sa.aborted is not None and "fewer than the threshold t=3" in sa.aborted
    view = sa.view("a", sa.session, now=5.1)
    assert view["stage"] == "aborted"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("", "l2_bound"),
        ("l2_bound = 1.0\nthreshold = 1\n", "threshold"),
        ("l2_bound = 1.0\nthreshold = 50\n", "at least a majority of clients_per_round"),
        ("l2_bound = 1.0\nstage_seconds = 0.0\n", "stage_seconds"),
    ],
)
def test_secagg_configurations_that_are_refused(tmp_path: Path, extra: str, message: str) -> None:
    text = TOML.replace(f"l2_bound = {L2}\n", "").replace("stage_seconds = 12.0\n", "") + extra
    with pytest.raises(ConfigError, match=message):
        offline_config(text, tmp_path)
    with pytest.raises(ConfigError, match="rounds"):
        offline_config(
            '[server]\nworkload = "fedavg"\n[secagg]\nenabled = true\nl2_bound = 1.0\n', tmp_path
        )
    with pytest.raises(ConfigError, match="fedavg"):
        offline_config("[secagg]\nenabled = true\nl2_bound = 1.0\n", tmp_path)


def test_a_failed_close_after_a_secure_round_is_retried_without_a_second_aggregate(
    tmp_path: Path,
) -> None:
    """The close after a secure round fails (its step breaks a safeguard, injected into the
    server's strategy): the round's sum stays stored once, the round stays open and the
    failure shows in ``/v1/status``; once the step works the retried close publishes the
    model of that same sum and the next round opens. The server runs in this process
    (uvicorn on loopback) so that the test can reach its strategy; the clients are the SDK."""
    k = 5
    toml = TOML.replace(f"clients_per_round = {K}", f"clients_per_round = {k}")
    config = offline_config(toml, tmp_path, store=str(tmp_path / "store"))
    tokens = issue_tokens(tmp_path / "store", k)
    app = create_app(config)
    service = app.service  # type: ignore[attr-defined]
    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: web.started, timeout=30, what="the in-process server")
        url = f"http://127.0.0.1:{web.servers[0].sockets[0].getsockname()[1]}"
        strategy = service.engine.strategy
        real_step = strategy.server_step

        def refuse(*args: object, **kwargs: object) -> object:
            raise SafeguardError("injected: the step breaks a safeguard")

        strategy.server_step = refuse
        deltas = _deltas()[:k]

        with httpx.Client(base_url=url, timeout=10.0) as http:
            params0 = np.array(http.get("/v1/model").json()["params"])
            with ThreadPoolExecutor(max_workers=k) as pool:
                outcomes = list(
                    pool.map(lambda i: _client_run(url, tokens[i], i, deltas[i]), range(k))
                )
            failed = wait_until(
                lambda: (s := status(http))["close_failures_total"] >= 2 and s,
                timeout=60,
                what="two failed closes",
            )
            assert failed["model_version"] == 0
            assert failed["last_close_error"]["error"] == "close_failed"
            assert "safeguard" in failed["last_close_error"]["detail"]
            assert failed["secagg"] == {
                "round": 0, "stage": "finished", "cohort": k, "excluded": [], "reason": None,
                "previous": None,
            }  # fmt: skip
            assert failed["updates_accepted_total"] == 1  # the sum, stored once
            strategy.server_step = real_step
            final = wait_until(
                lambda: (
                    (s := status(http))["model_version"] == 1 and s["secagg"]["round"] == 1 and s
                ),
                timeout=60,
                what="the retried close and the next round",
            )
            params1 = np.array(http.get("/v1/model").json()["params"])
    finally:
        web.should_exit = True
        thread.join(timeout=30)
    assert outcomes == ["finished"] * k
    assert final["updates_accepted_total"] == 1 and final["updates_counted_total"] == k
    assert final["last_close_error"] is None
    _assert_step_is_the_clear_mean(params1 - params0, deltas, k)


PROXY_TOKENS = {"a": "proxy-a-token-0123456789", "b": "proxy-b-token-0123456789"}
PROXIES_TOML = "".join(
    f'[[proxies]]\nname = "{name}"\ntoken = "{token}"\nmax_clients = 6\n'
    for name, token in PROXY_TOKENS.items()
)


def test_proxies_sum_their_clients_masked_inputs_and_the_model_is_the_clear_mean(
    tmp_path: Path,
) -> None:
    """12 SDK clients over loopback: clients 0-5 hand their masked input to proxy a, 6-9 to
    proxy b, 10-11 send it to the server themselves (FedPS's hierarchy with secure
    aggregation). Client 0 drops out before its masked input, client 6 after it. Each proxy
    sends the server one sum (`SecureProxy`); the model is the clear mean of the eleven
    contributors' clipped deltas. A sum without a proxy's token is refused, and a proxy
    cannot send a clear aggregate either (what else a sum must be: the next test)."""
    k = 12
    members = {"a": range(0, 6), "b": range(6, 10)}
    toml = TOML.replace(f"clients_per_round = {K}", f"clients_per_round = {k}").replace(
        "stage_seconds = 12.0", "stage_seconds = 8.0"
    )
    deltas = _deltas()[:k]
    drop = {0: "check_shares", 6: "masked_input"}
    with live_server(tmp_path, toml + PROXIES_TOML) as live:
        url = live.process.url
        params0 = np.array(live.client.get("/v1/model").json()["params"])
        aggregate = {"aggregate": {}, "count": 1, "batch_id": "b", "model_version": 0}
        auth = {"Authorization": f"Bearer {PROXY_TOKENS['a']}"}
        masked_sum = {"session": "x", "stage": "masked_sum", "message": {}}
        for headers in ({}, {"Authorization": "Bearer not-a-proxy-token-0123"}):
            reply = live.client.post("/v1/secagg", json=masked_sum, headers=headers)
            assert_error(reply, 401, "unauthorized")
        assert_error(
            live.client.post("/v1/updates:batch", json=aggregate, headers=auth),
            403,
            "secure_aggregation_only",
        )
        with Client(url) as a_conn, Client(url) as b_conn:
            proxies = {
                "a": SecureProxy(a_conn, PROXY_TOKENS["a"], DIM),
                "b": SecureProxy(b_conn, PROXY_TOKENS["b"], DIM),
            }
            expected = {name: len(ids) - (name == "a") for name, ids in members.items()}
            forwarded: dict[str, int] = {}
            lock = threading.Lock()

            def hand_in(name: str) -> Callable[[dict[str, object]], None]:
                def to_proxy(body: dict[str, object]) -> None:
                    proxy = proxies[name]
                    proxy.receive(body)
                    with lock:
                        if len(proxy.senders) == expected[name]:
                            forwarded[name] = proxy.forward()

                return to_proxy

            tokens = issue_tokens(live.store, k)

            def run(i: int) -> str:
                name = next((n for n, ids in members.items() if i in ids), None)
                rng = np.random.default_rng(i)
                with Client(url, rng=rng, enrollment_token=tokens[i]) as client:
                    checkin = client.checkin()
                    report = send_secure(
                        client, checkin, deltas[i], poll_seconds=0.05, drop_after=drop.get(i),
                        masked_input_to=None if name is None else hand_in(name),
                    )  # fmt: skip
                    return report.outcome or report.sent

            with ThreadPoolExecutor(max_workers=k) as pool:
                outcomes = list(pool.map(run, range(k)))
            wait_until(
                lambda: status(live.client)["model_version"] == 1,
                timeout=60,
                what="the secure round's close",
            )
            params1 = np.array(live.client.get("/v1/model").json()["params"])
    assert forwarded == {"a": 5, "b": 4}
    assert outcomes == ["check_shares"] + ["finished"] * 5 + ["masked_input"] + ["finished"] * 5
    contributors = [i for i in range(k) if i != 0]
    _assert_step_is_the_clear_mean(params1 - params0, deltas[contributors], k)


def test_a_round_checks_a_proxys_masked_sum() -> None:
    """What `SecAggRound.receive_sum` refuses (the app has checked the proxy's token), on a
    real session of 4 protocol clients: 1-3 share their keys, 4 drops out before; 1 sends
    its masked input itself."""
    sa = SecAggRound(0, DIM, 4, 2, L2, 60.0)
    names = {u: f"c{u}" for u in range(1, 5)}
    clients = {}
    for u, name in names.items():
        assert sa.join(name, now=0.0)["id"] == u
        clients[u] = SecAggClient(u, sa.params)
    zeros = base64.b64encode(bytes(4 * DIM)).decode()
    nothing = base64.b64encode(bytes(32)).decode(), base64.b64encode(bytes(64)).decode()

    def body(senders: list[int], **extra: object) -> dict[str, object]:
        message = {"senders": senders, "masked": zeros, "digests": [nothing[0]] * len(senders),
                   "signatures": [nothing[1]] * len(senders)}  # fmt: skip
        return {"session": sa.session, "stage": "masked_sum", "message": message} | extra

    def send(u: int, stage: str, message: dict[str, object], now: float = 1.0) -> None:
        sa.receive({"client_id": names[u], "session": sa.session, "stage": stage,
                    "message": message}, now=now)  # fmt: skip

    with pytest.raises(BadRequest) as err:
        sa.receive_sum(body([1]), 6, now=0.0)
    assert (err.value.status, err.value.code) == (409, "secagg_wrong_stage")
    for u, c in clients.items():
        send(u, "advertise", wire.advertise_to_json(c.advertise_keys()))
    for u in (1, 2, 3):
        view = sa.view(names[u], sa.session, now=1.0)
        directory = wire.directory_from_json(view["directory"], 4)
        send(u, "share_keys", wire.share_keys_to_json(clients[u].share_keys(directory)))
    sa.advance(now=100.0)  # client 4's shares never come: the stage closes at its deadline
    assert sa.stage_name == "check_shares"
    for u in (1, 2, 3):
        view = sa.view(names[u], sa.session, now=100.0)
        forwarded = wire.forwarded_from_json(view["forwarded"], 4)
        check = clients[u].check_shares(forwarded)
        send(u, "check_shares", wire.share_check_to_json(check), now=100.0)
    assert sa.stage_name == "masked_input"
    masking = wire.masking_from_json(sa.view("c1", sa.session, now=100.0)["masking"], 4)
    inputs = {u: clients[u].masked_input(masking, np.zeros(DIM, np.uint64)) for u in (1, 2, 3)}
    send(1, "masked_input", wire.masked_to_json(inputs[1]), now=100.0)
    cases = [
        (body([2], extra=1), 422, "invalid"),
        ({**body([2]), "session": "AAAA"}, 409, "secagg_wrong_session"),
        ({**body([2]), "stage": "masked_input"}, 422, "invalid"),
        (body([3, 2]), 422, "invalid_secagg_message"),  # not sorted
        (body([2, 2]), 422, "invalid_secagg_message"),
        (body([2, 3, 4]), 422, "invalid_secagg_message"),  # over this proxy's 2
        (body([2], message={"senders": [2], "masked": "AA=="}), 422, "invalid_secagg_message"),
        (body([2, 4]), 409, "secagg_dropped"),  # 4 shared no keys
        (body([1, 2]), 409, "secagg_repeated"),  # 1 sent its own
        (body([2, 3]), 403, "secagg_bad_signature"),  # neither signed these
    ]  # fmt: skip
    for case, status_code, code in cases:
        with pytest.raises(BadRequest) as err:
            sa.receive_sum(case, 2, now=100.0)
        assert (err.value.status, err.value.code) == (status_code, code), case
    with pytest.raises(BadRequest) as err:  # a proxy allowed 1e9 still sums at most the cohort
        sa.receive_sum(body([2, 3, 4, 5, 6]), 10**9, now=100.0)
    assert (err.value.status, err.value.code) == (422, "invalid_secagg_message")
    assert sa.done == {1} and sa.server._s.u3 == {1}
    proxy = MaskedInputProxy(DIM)
    for u in (2, 3):
        proxy.receive(inputs[u])
    good = {**body([2, 3]), "message": wire.masked_sum_to_json(proxy.forward())}
    sa.receive_sum(good, 2, now=100.0)  # a good sum closes the stage: all of U2 sent
    assert sa.stage_name == "unmasking" and sa.done == set()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"poll_seconds": 0.0}, "poll_seconds"),
        ({"poll_seconds": 2.0, "max_poll_seconds": 1.0}, "poll_seconds"),
        ({"drop_after": "never"}, "drop_after"),
    ],
)
def test_send_secure_refuses_bad_options_before_it_sends(
    options: dict[str, object], message: str
) -> None:
    """Nothing is sent (the client at port 9 is never contacted)."""
    checkin = Checkin("c", True, 0, secagg={"session": "AAAAAAAAAAAAAAAAAAAAAA=="})
    with Client("http://127.0.0.1:9") as client, pytest.raises(FedrankError, match=message):
        send_secure(client, checkin, np.zeros(DIM), **options)  # type: ignore[arg-type]


def test_a_secure_proxy_refuses_what_it_cannot_sum() -> None:
    """`SecureProxy.receive` (no request is made: the server at port 9 is never contacted):
    only masked inputs of one session, of the model's dimension, each sender once, at most
    `max_clients` of them; nothing to forward before the first."""
    vector = base64.b64encode(bytes(4 * DIM)).decode()
    signature = base64.b64encode(bytes(64)).decode()

    def body(sender: int, session: str = "s1", **extra: object) -> dict[str, object]:
        message = {"sender": sender, "masked": vector, "signature": signature}
        return {"client_id": f"c{sender}", "session": session, "stage": "masked_input",
                "message": message} | extra  # fmt: skip

    with Client("http://127.0.0.1:9") as conn:
        proxy = SecureProxy(conn, PROXY_TOKENS["a"], DIM, max_clients=2)
        with pytest.raises(FedrankError, match="nothing to forward"):
            proxy.forward()
        proxy.receive(body(1))
        cases = [
            ({"session": "s1"}, "client_id, session, stage, message"),
            (body(2, stage="share_keys"), "masked inputs only"),
            (body(2, message={"sender": 2, "masked": "AA==", "signature": signature}), "bytes"),
            (body(2, session="s2"), "another session"),
            (body(1), "twice"),
        ]
        for case, message in cases:
            with pytest.raises(FedrankError, match=message):
                proxy.receive(case)
        proxy.receive(body(2))
        with pytest.raises(FedrankError, match="at most 2"):
            proxy.receive(body(3))
        assert proxy.senders == (1, 2)


def test_a_registry_key_is_the_only_one_a_device_may_advertise() -> None:
    """With a device registry (`public_key_of`: a server that requires enrolled devices
    passes `Identity.public_key`, `fedrank.server.rounds`), a member must advertise its
    enrolled key (403 `secagg_wrong_key` otherwise); a client the registry does not know
    binds the key it advertises."""
    device = signing.generate_signing_key()
    registry = {"device": signing.public_bytes(device)}
    sa = SecAggRound(0, DIM, 3, 2, L2, 60.0, public_key_of=registry.get)
    members = {}
    for name in ("device", "other", "unknown"):
        block = sa.join(name, now=0.0)
        key = device if name == "device" else None
        members[name] = SecAggClient(block["id"], sa.params, signing_key=key)

    def advertise(name: str, client: SecAggClient) -> None:
        message = wire.advertise_to_json(client.advertise_keys())
        body = {"client_id": name, "session": sa.session, "stage": "advertise"}
        sa.receive({**body, "message": message}, now=1.0)

    with pytest.raises(BadRequest) as err:  # "device" signs with a key of its own
        advertise("device", SecAggClient(1, sa.params))
    assert (err.value.status, err.value.code) == (403, "secagg_wrong_key")
    registry["other"] = signing.public_bytes(signing.generate_signing_key())
    with pytest.raises(BadRequest) as err:
        advertise("other", members["other"])
    assert (err.value.status, err.value.code) == (403, "secagg_wrong_key")
    advertise("device", members["device"])
    advertise("unknown", members["unknown"])
    assert sa.done == {1, 3}


def test_the_noise_norm_bound_holds_and_is_a_few_times_the_typical_norm() -> None:
    """`noise_norm_bound` (the decoded sum's check under distributed DP): 2,000 draws of
    Skellam vectors stay below it; it is ``2 sqrt(2 (d ln 5 + 40 ln 2) V)`` for large
    ``V``, which tends to 3.6 ``sqrt(d V)`` as ``d`` grows (docs/secagg.md)."""
    rng = np.random.default_rng(3)
    for variance, dim in ((1e6, 22), (4e8, 1000), (50.0, 8)):
        bound = noise_norm_bound(variance, dim)
        draws = np.stack([skellam_noise(rng, variance, dim) for _ in range(2000)])
        assert np.linalg.norm(draws, axis=1).max() < bound, (variance, dim)
    for variance, dim in ((1e6, 22), (4e8, 1000)):
        spread = dim * np.log(5.0) + 40 * np.log(2.0)
        expected = 2 * np.sqrt(2 * spread * variance)
        assert noise_norm_bound(variance, dim) == pytest.approx(expected, rel=1e-3)
    assert noise_norm_bound(4e8, 1000) < 3.7 * np.sqrt(1000 * 4e8)
    assert noise_norm_bound(0.0, 5) == 0.0
