"""Server-issued FOLtR-ES seeds (``[foltr_es] server_seeds``, :mod:`fedrank.server.seeds`).

The attack: a client that chooses its own seed can search ``m`` seeds for one whose noise
points along a target direction and report the largest metric; the server then adds that
noise to its gradient estimate. The defense: the server issues the seed at check-in with an
HMAC token, and an update must carry the token of the seed it reports.

First the pieces in-process (tokens, claims, the round's answers, the config, the payload
format), then real ``fedrank serve`` processes over loopback with their own stores: issued
seeds accepted in every form that names the client and aggregated; a shopped seed, forged,
missing and malformed tokens refused without changing anything; a token bound to its client
(another client cannot spend it, nor a batch that names none) and to its model version (and
the stale policy); one report per issued seed; tokens and claims surviving a restart; and,
without server seeds, the old protocol with the attack succeeding.
"""

from __future__ import annotations

import math
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrank.core.codec import encode_batch
from fedrank.core.seeded_noise import gaussian_noise
from fedrank.errors import ConfigError
from fedrank.server.cohort import Cohort
from fedrank.server.config import load_config
from fedrank.server.sections import RoundsSection
from fedrank.server.seeds import SECRET_KEY, TOKEN_HEX, SeedClaims, SeedIssuer
from fedrank.server.workloads import make_workload
from fedrank.systems.foltr_es.wire import SeedTokenError
from fedrank.systems.wire import PayloadError
from tests.cli.clirun import assert_clean_failure, run
from tests.server.serverkit import (
    ADMIN_TOKEN,
    PROXIES_TOML,
    Live,
    admin,
    assert_error,
    binary_headers,
    closed_iteration,
    es_bytes,
    live_server,
    recompute_state,
    recompute_step,
    state_of,
    status,
    store_query,
    stored_rows,
)
from tests.server.test_server_rounds import decided

BATCH = "application/vnd.fedrank.batch"
SECRET = bytes(range(32))


def seeds_config(clients: int, server_seeds: bool = True, max_staleness: int = 0) -> str:
    """A foltr-es server with rounds of 20 seats that never complete during a test (the
    tests close iterations with the admin endpoint), whose check-in window closes once
    ``clients`` clients wait (all seated)."""
    return f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
max_staleness = {max_staleness}
[iteration]
tick_seconds = 0.05
[foltr_es]
server_seeds = {"true" if server_seeds else "false"}
[rounds]
enabled = true
clients_per_round = 20
t_max_seconds = 600.0
checkin_seconds = 0.1
min_checkins = {clients}
"""


def serve(tmp_path: Path, text: str) -> Any:
    return live_server(tmp_path, text, iteration_seconds=0)


# -- the pieces, in-process ---------------------------------------------------------------


def test_a_token_vouches_for_one_seed_at_one_version() -> None:
    issuer = SeedIssuer(SECRET)
    issued = issuer.issue(7, "cl1", nonce=b"\x01" * 8)
    assert issued == issuer.issue(7, "cl1", nonce=b"\x01" * 8)  # secret, version, nonce, client
    assert issued.model_version == 7 and 0 <= issued.seed < 2**32
    assert len(issued.token) == TOKEN_HEX and int(issued.token[:16][:2], 16) == 7
    token = bytes.fromhex(issued.token)
    assert issuer.refusal(token, issued.seed, 7, "cl1") is None
    assert issuer.issue(7, "cl1", nonce=b"\x02" * 8).seed != issued.seed
    assert issuer.issue(8, "cl1", nonce=b"\x01" * 8).seed != issued.seed
    # Any other seed, any changed byte, another secret: not issued by this server.
    assert issuer.refusal(token, issued.seed ^ 1, 7, "cl1")[:2] == (422, "bad_seed_token")  # type: ignore[index]
    for position in (0, 8, 16, 31):  # version, nonce, MAC
        forged = bytearray(token)
        forged[position] ^= 0x01
        assert issuer.refusal(bytes(forged), issued.seed, 7, "cl1")[1] == "bad_seed_token"  # type: ignore[index]
    other = SeedIssuer(bytes(32)).issue(7, "cl1")
    assert issuer.refusal(bytes.fromhex(other.token), other.seed, 7, "cl1")[1] == "bad_seed_token"  # type: ignore[index]
    assert issuer.refusal(token[:31], issued.seed, 7, "cl1")[1] == "bad_seed_token"  # type: ignore[index]
    # Bound to its client: another client cannot spend it, nor a report naming none.
    cl2 = issuer.refusal(token, issued.seed, 7, "cl2")
    assert cl2 is not None and cl2[:2] == (422, "bad_seed_token") and "to client 'cl2'" in cl2[2]
    nobody = issuer.refusal(token, issued.seed, 7, None)
    assert nobody is not None and nobody[1] == "bad_seed_token" and "send it with" in nobody[2]
    # A genuine token for another version than the message names: stale.
    code = issuer.refusal(token, issued.seed, 8, "cl1")
    assert code is not None and code[:2] == (409, "stale") and "version 7" in code[2]
    with pytest.raises(ConfigError, match="32 bytes"):
        SeedIssuer(b"short")
    assert "secret" not in repr(issuer).replace("<secret>", "")


def test_claims_count_each_issued_seed_once() -> None:
    claims = SeedClaims([((3, b"a" * 8), "m1")])
    assert claims.refusal((3, b"a" * 8), "m1") is None  # the claiming message may be resent
    refused = claims.refusal((3, b"a" * 8), "m2")
    assert refused is not None and refused[:2] == (409, "duplicate_seed") and "'m1'" in refused[2]
    claims.claim((3, b"b" * 8), "m3")
    claims.settle((3, b"b" * 8), "m3", 409)  # refused by the writer (stale): released
    assert claims.refusal((3, b"b" * 8), "m4") is None
    claims.claim((3, b"b" * 8), "m4")
    for status_code in (202, 200, 500):  # stored, or may have been: kept
        claims.settle((3, b"b" * 8), "m4", status_code)
        assert claims.refusal((3, b"b" * 8), "m5") is not None
    claims.settle((3, b"b" * 8), "other", 422)  # only the holder's refusal releases
    assert claims.refusal((3, b"b" * 8), "m5") is not None
    claims.claim((5, b"c" * 8), "m6")
    assert len(claims) == 3
    claims.forget_before(4)  # versions the server refuses as stale anyway
    assert len(claims) == 1 and claims.refusal((3, b"a" * 8), "m9") is None


def test_a_round_issues_one_seed_per_client_and_model_version() -> None:
    issuer = SeedIssuer(SECRET)
    config = RoundsSection(enabled=True, clients_per_round=2, checkin_seconds=1.0, min_checkins=2)
    r = Cohort(2, config, random.Random(0), issue_seed=issuer.issue)
    waiting = r.checkin("a", now=0.0, model_version=4)
    assert waiting["waiting"] is True and "seed" not in waiting  # no seat yet, no seed
    r.checkin("b", now=0.5, model_version=4)
    a = r.checkin("a", now=1.0, model_version=4)  # the window's end: both seated
    assert set(a) == {"selected", "round", "model_version", "deadline", "seed", "seed_token"}
    assert issuer.refusal(bytes.fromhex(a["seed_token"]), a["seed"], 4, "a") is None
    assert issuer.refusal(bytes.fromhex(a["seed_token"]), a["seed"], 4, "b") is not None
    assert r.checkin("a", now=1.5, model_version=4) == a  # checking in again: the same seed
    moved = r.checkin("a", now=2.0, model_version=5)  # the model moved on: a seed for it
    assert moved["seed_token"] != a["seed_token"]
    assert issuer.refusal(bytes.fromhex(moved["seed_token"]), moved["seed"], 5, "a") is None
    assert r.checkin("b", now=2.0, model_version=5)["seed"] != moved["seed"]
    full = r.checkin("c", now=2.0, model_version=5)
    assert full["selected"] is False and "seed" not in full  # no seat, no seed
    plain = Cohort(0, config, random.Random(0), min_checkins=1)
    plain.checkin("x", 0.0, 0)
    assert plain.select(1.0) == ["x"]
    answer = plain.checkin("x", 1.0, 0)
    assert answer["selected"] is True and "seed" not in answer and "seed_token" not in answer


def test_the_config_key_and_its_rules(tmp_path: Path) -> None:
    def load(text: str) -> Any:
        path = tmp_path / "server.toml"
        path.write_text(text)
        return load_config(path)

    assert load_config(workload="foltr-es").server_seeds is False
    assert load_config(workload="foltr-es").client_view()["server_seeds"] is False
    config = load(seeds_config(1))
    assert config.server_seeds is True and config.system_config.sigma == 0.01
    assert config.client_view()["server_seeds"] is True
    no_rounds = '[server]\nworkload = "foltr-es"\n[foltr_es]\nserver_seeds = true\n'
    with pytest.raises(ConfigError, match=r"server_seeds = true needs \[rounds\] enabled"):
        load(no_rounds)
    with pytest.raises(ConfigError, match=r"cannot take \[\[proxies\]\]"):
        load(seeds_config(1) + PROXIES_TOML)
    with pytest.raises(ConfigError, match=r"\[foltr_es\] server_seeds must be true or false"):
        load('[foltr_es]\nserver_seeds = "yes"\n')
    with pytest.raises(ConfigError, match="known keys: .*difference_bound, server_seeds"):
        load("[foltr_es]\nserver_seed = true\n")
    # The key is the foltr-es workload's: another workload ignores it, like [foltr_es] itself.
    assert load("[foltr_es]\nserver_seeds = true\n").workload == "frecency"
    path = tmp_path / "no-rounds.toml"
    path.write_text(no_rounds)
    assert_clean_failure(run(["serve", "--config", str(path)]), "needs [rounds] enabled")


def test_the_token_format_is_bounded() -> None:
    config = load_config(workload="foltr-es")
    workload = make_workload(config).wire
    good = SeedIssuer(SECRET).issue(0, "c")
    base = {"seed": good.seed, "metric": 0.5, "antithetic_metric": 0.25}
    parsed = workload.parse({**base, "seed_token": good.token})
    assert parsed.seed_token == bytes.fromhex(good.token)
    assert workload.stored_payload(parsed)["seed_token"] == good.token
    assert workload.parse(base).seed_token is None
    for bad in (good.token.upper(), good.token[:-1], good.token + "0", "z" * TOKEN_HEX,
                "0" * 100_000, 17, None, [good.token], {"t": 1}):  # fmt: skip
        with pytest.raises(SeedTokenError, match="64 lowercase hex") as caught:
            workload.parse({**base, "seed_token": bad})
        assert caught.value.code == "bad_seed_token"
    assert PayloadError("x").code == "invalid_payload"
    with pytest.raises(PayloadError, match="unknown payload field"):
        workload.parse({**base, "seed_tokens": good.token})


# -- helpers for the live servers -----------------------------------------------------------


def checkin(live: Live, *client_ids: str) -> Any:
    """Check in ``client_ids`` together (in one window) and poll until the seats are drawn;
    each must be seated. The answer (of each, for several)."""
    for client_id in client_ids:
        response = live.client.post("/v1/checkin", json={"client_id": client_id})
        assert response.status_code == 200, response.text
    answers = [decided(live, client_id) for client_id in client_ids]
    for answer in answers:
        assert answer["selected"] is True, answer
    return answers[0] if len(answers) == 1 else answers


def seeded(
    message_id: str,
    answer: dict[str, Any],
    metric: float = 0.5,
    anti: float = 0.25,
    client_id: str | None = None,
    version: int | None = None,
    **payload: Any,
) -> dict[str, Any]:
    """A JSON FOLtR-ES message reporting the seed of a check-in ``answer`` with its token
    (``payload`` overrides fields, e.g. ``seed_token=...``)."""
    body = {"seed": answer["seed"], "metric": metric, "antithetic_metric": anti,
            "seed_token": answer["seed_token"], **payload}  # fmt: skip
    message = {
        "message_id": message_id,
        "model_version": answer["model_version"] if version is None else version,
        "payload": {k: v for k, v in body.items() if v is not None},
    }
    if client_id is not None:
        message["client_id"] = client_id
    return message


def record(answer: dict[str, Any], metric: float = 0.5, anti: float = 0.25) -> bytes:
    """The binary form with a token: the 12-byte ES message, then the token's 32 bytes."""
    return es_bytes(answer["seed"], metric, anti) + bytes.fromhex(answer["seed_token"])


def post_binary_batch(live: Live, ids: list[str], version: int, records: bytes) -> Any:
    body = encode_batch(ids, version, records)
    return live.client.post("/v1/updates:batch", content=body, headers={"Content-Type": BATCH})


def close(live: Live) -> int:
    """Close the open iteration (admin); the new model version."""
    response = admin(live.client, "close")
    assert response.status_code == 200, response.text
    return int(response.json()["model_version"])


def shop(dim: int, target: np.ndarray, m: int, rng: np.random.Generator) -> tuple[int, float]:
    """The attack: of ``m`` random seeds, the one whose noise has the largest cosine with
    ``target``; returns it and that cosine."""
    seeds = rng.integers(0, 2**32, size=m, dtype=np.uint64).astype(np.uint32)
    noise = gaussian_noise(seeds, dim).astype(np.float64)
    cosine = noise @ target / np.linalg.norm(noise, axis=1)
    best = int(np.argmax(cosine))
    return int(seeds[best]), float(cosine[best])


# -- live servers ----------------------------------------------------------------------------


def test_issued_seeds_are_accepted_in_every_form_and_aggregated(tmp_path: Path) -> None:
    with serve(tmp_path, seeds_config(4)) as live:
        client = live.client
        # "idle" is seated and never reports, so the round stays open and the test's admin
        # close is the only one (a round whose seats all reported closes by itself, at the
        # scheduler's next tick, which a slow test would race)
        *seated, _ = checkin(live, "c0", "c1", "c2", "idle")
        answers = dict(zip(("c0", "c1", "c2"), seated, strict=True))
        for answer in answers.values():
            assert 0 <= answer["seed"] < 2**32 and answer["model_version"] == 0
            assert len(answer["seed_token"]) == TOKEN_HEX
        assert checkin(live, "c0") == answers["c0"]  # checking in again: the same seed
        assert len({a["seed"] for a in answers.values()}) == 3
        assert client.get("/v1/model").json()["config"]["server_seeds"] is True

        single = client.post("/v1/updates", json=seeded("m0", answers["c0"], client_id="c0"))
        assert single.status_code == 202, single.text
        binary = client.post(
            "/v1/updates",
            content=record(answers["c1"], 0.75, 0.25),
            headers=binary_headers("m1", 0, client_id="c1"),
        )
        assert binary.status_code == 202, binary.text
        batch = client.post(
            "/v1/updates:batch",
            json={"messages": [seeded("m2", answers["c2"], 0.0, 0.5, client_id="c2")]},
        )
        assert batch.json()["statuses"] == [202], batch.text

        rows = stored_rows(live.store, 0)
        assert [r["message_id"] for r in rows] == ["m0", "m1", "m2"]
        for row, name in zip(rows, ("c0", "c1", "c2"), strict=True):
            assert row["payload"]["seed"] == answers[name]["seed"]
            assert row["payload"]["seed_token"] == answers[name]["seed_token"]
        assert close(live) == 1
        # The model moved by the ES gradient of exactly the issued seeds' noise.
        state = recompute_state(live.config, rows)
        expected = recompute_step(live.config, live.store, 0, state)
        np.testing.assert_allclose(client.get("/v1/model/1").json()["params"], expected,
                                   rtol=1e-12, atol=1e-15)  # fmt: skip
        assert closed_iteration(live.store, 0)["n_updates"] == 3


def test_shopped_forged_missing_and_malformed_tokens_are_refused(tmp_path: Path) -> None:
    """The defense. Without verification the shopped seed (first refusal below) would be
    accepted: this test fails if the token check is removed."""
    with serve(tmp_path, seeds_config(2)) as live:
        client = live.client
        mallory, honest = checkin(live, "mallory", "honest")
        dim = make_workload(live.config).dim
        rng = np.random.default_rng(5)
        target = rng.normal(size=dim)
        target /= np.linalg.norm(target)
        best, cosine = shop(dim, target, 2000, rng)
        assert cosine > 0.4  # what the attack would push with (a random seed: ~0 +- 0.15)
        before = state_of(client)

        def refused(message: dict[str, Any], code: str, detail: str = "") -> None:
            response = client.post("/v1/updates", json=message)
            assert_error(response, 422, code, detail)

        # The shopped seed with the token the server issued for another seed.
        refused(seeded("x1", mallory, 1.0, 0.0, client_id="mallory", seed=best),
                "bad_seed_token", f"not issued by this server for seed {best}")  # fmt: skip
        # The honest client's token, taken for the shopped seed.
        refused(seeded("x2", honest, 1.0, 0.0, client_id="mallory", seed=best), "bad_seed_token")
        token = bytes.fromhex(mallory["seed_token"])
        for position in (0, 9, 20, 31):  # version, nonce, MAC: one bit each
            forged = bytearray(token)
            forged[position] ^= 0x80
            message = seeded("x3", mallory, client_id="mallory", seed_token=bytes(forged).hex())
            refused(message, "bad_seed_token", "not issued by this server")
        outsider = SeedIssuer(bytes(32)).issue(
            0, "mallory"
        )  # a well-formed token under another secret
        refused(seeded("x4", {**mallory, "seed": outsider.seed, "seed_token": outsider.token},
                       client_id="mallory"), "bad_seed_token")  # fmt: skip
        missing = seeded("x5", mallory, client_id="mallory")
        del missing["payload"]["seed_token"]
        refused(missing, "bad_seed_token", "check in (POST /v1/checkin)")
        for bad in (mallory["seed_token"].upper(), mallory["seed_token"][:-2], "0" * 200_000,
                    12345, [mallory["seed_token"]], {"token": 1}, True):  # fmt: skip
            refused(seeded("x6", mallory, client_id="mallory", seed_token=bad),
                    "bad_seed_token", "64 lowercase hex")  # fmt: skip
        null = seeded("x7", mallory, client_id="mallory")
        null["payload"]["seed_token"] = None
        refused(null, "bad_seed_token", "64 lowercase hex")

        # The binary forms: a forged token, a record without one; the batch forms name no
        # client, so they cannot spend a token (refused before it is looked at).
        forged_record = es_bytes(best, 1.0, 0.0) + token
        bad_binary = client.post("/v1/updates", content=forged_record,
                                 headers=binary_headers("x8", 0, client_id="mallory"))  # fmt: skip
        assert_error(bad_binary, 422, "bad_seed_token", "not issued by this server")
        short = client.post("/v1/updates", content=es_bytes(best, 1.0, 0.0),
                            headers=binary_headers("x9", 0, client_id="mallory"))  # fmt: skip
        assert_error(short, 422, "invalid_payload", "44 bytes")
        whole = post_binary_batch(live, ["x10", "x11"], 0, record(honest) + forged_record)
        assert_error(whole, 409, "not_selected", "a binary batch names no client")
        columnar = client.post("/v1/updates:batch", json={
            "batch": {"size": 1, "seed": [best], "metric": [1.0], "antithetic": [0.0]},
            "message_ids": ["x12"], "model_version": 0})  # fmt: skip
        assert_error(columnar, 409, "not_selected", "a columnar batch names no client")
        spent = client.post("/v1/updates", json=seeded("x14", honest, client_id="mallory"))
        mallory_id = live.device_id("mallory")
        assert_error(spent, 422, "bad_seed_token", f"to client '{mallory_id}'")  # honest's
        in_batch = client.post("/v1/updates:batch", json={"messages": [
            seeded("x13", mallory, 1.0, 0.0, client_id="mallory", seed=best)]})  # fmt: skip
        assert in_batch.json()["statuses"] == [422]
        assert in_batch.json()["errors"][0]["error"] == "bad_seed_token"

        assert state_of(client) == before  # nothing stored, nothing counted
        assert stored_rows(live.store) == []
        rejected = status(client)["updates_rejected_total"]
        assert rejected >= 21
        # The refusals burnt nothing: mallory can still report its issued seed, once.
        ok = client.post("/v1/updates", json=seeded("m1", mallory, 1.0, 0.0, client_id="mallory"))
        assert ok.status_code == 202, ok.text


def test_each_issued_seed_counts_once(tmp_path: Path) -> None:
    with serve(tmp_path, seeds_config(4)) as live:
        client = live.client
        a, b, c, d = checkin(live, "a", "b", "c", "d")
        assert client.post("/v1/updates", json=seeded("ma", a, client_id="a")).status_code == 202
        # The same seed again: from its client, from another selected client, in a batch.
        again = client.post("/v1/updates", json=seeded("ma2", a, 0.9, 0.1, client_id="a"))
        assert_error(again, 409, "duplicate_seed", "already reported, as message 'ma'")
        taken = client.post("/v1/updates", json=seeded("ma3", a, 0.9, 0.1, client_id="b"))
        assert_error(taken, 422, "bad_seed_token", f"to client '{live.device_id('b')}'")  # a's
        # A resend of the accepted message (its answer lost) is a duplicate, as ever.
        resent = client.post("/v1/updates", json=seeded("ma", a, client_id="a"))
        assert resent.status_code == 200 and resent.json()["status"] == "duplicate"
        twice = client.post("/v1/updates:batch", json={"messages": [
            seeded("mb1", b, client_id="b"), seeded("mb2", b, client_id="b")]})  # fmt: skip
        assert twice.json()["statuses"] == [202, 409]
        assert twice.json()["errors"][0]["error"] == "duplicate_seed"
        replayed = post_binary_batch(live, ["mc0", "ma4"], 0, record(c) + record(a))
        assert_error(replayed, 409, "not_selected", "a binary batch names no client")
        first = client.post("/v1/updates", content=record(c),
                            headers=binary_headers("mc3", 0, client_id="c"))  # fmt: skip
        assert first.status_code == 202, first.text
        retry = client.post("/v1/updates", content=record(c),
                            headers=binary_headers("mc3", 0, client_id="c"))  # fmt: skip
        assert retry.status_code == 200  # a retry
        binary = client.post("/v1/updates", content=record(c),
                             headers=binary_headers("mc4", 0, client_id="d"))  # fmt: skip
        assert_error(binary, 422, "bad_seed_token", f"to client '{live.device_id('d')}'")
        # A report that names no client is its device's: here another device than d's (the
        # one serverkit signs unnamed requests with), which cannot spend d's token.
        anonymous = client.post("/v1/updates", content=record(d),
                                headers=binary_headers("md0", 0))  # fmt: skip
        assert_error(anonymous, 422, "bad_seed_token", f"to client '{live.device_id('')}'")
        assert client.post("/v1/updates", json=seeded("md", d, client_id="d")).status_code == 202
        assert sorted(r["message_id"] for r in stored_rows(live.store)) == [
            "ma", "mb1", "mc3", "md"]  # fmt: skip


def test_a_token_is_bound_to_its_model_version(tmp_path: Path) -> None:
    with serve(tmp_path, seeds_config(2)) as live:
        client = live.client
        a, b = checkin(live, "a", "b")
        assert client.post("/v1/updates", json=seeded("ma", a, client_id="a")).status_code == 202
        assert close(live) == 1
        before = state_of(client)
        stale = client.post("/v1/updates", json=seeded("mb", b, client_id="b"))
        assert_error(stale, 409, "stale", "computed on model version 0")  # max_staleness 0
        relabelled = client.post("/v1/updates", json=seeded("mb", b, client_id="b", version=1))
        assert_error(relabelled, 409, "stale", "issued for model version 0")
        assert state_of(client) == before
        fresh = checkin(live, "b")  # the same round, a new model: a seed for it
        assert fresh["model_version"] == 1 and fresh["seed_token"] != b["seed_token"]
        assert fresh["seed_token"].startswith("01" + "0" * 14)  # the version, little-endian
        ok = client.post("/v1/updates", json=seeded("mb2", fresh, client_id="b"))
        assert ok.status_code == 202, ok.text


def test_with_max_staleness_a_token_counts_per_the_stale_policy(tmp_path: Path) -> None:
    with serve(tmp_path, seeds_config(3, max_staleness=1)) as live:
        client = live.client
        a, b, c = checkin(live, "a", "b", "c")
        assert client.post("/v1/updates", json=seeded("ma", a, client_id="a")).status_code == 202
        assert close(live) == 1
        late = client.post("/v1/updates", json=seeded("mb", b, client_id="b"))
        assert late.status_code == 202, late.text  # one version behind: accepted
        assert close(live) == 2
        too_late = client.post("/v1/updates", json=seeded("mc", c, client_id="c"))
        assert_error(too_late, 409, "stale", "computed on model version 0")


def test_tokens_and_claims_survive_a_restart(tmp_path: Path) -> None:
    with serve(tmp_path, seeds_config(2)) as live:
        client = live.client
        a, b = checkin(live, "a", "b")
        assert client.post("/v1/updates", json=seeded("ma", a, client_id="a")).status_code == 202
        secret = store_query(live.store, "SELECT value FROM meta WHERE key = ?", (SECRET_KEY,))
        assert len(secret) == 1 and len(secret[0][0]) == 64
        live.process.kill()  # kill -9
        live.process.start()
        assert store_query(live.store, "SELECT value FROM meta WHERE key = ?", (SECRET_KEY,)) == (
            secret
        )
        # The selection lived in memory: a and b check in again, and b's old token holds.
        old = client.post("/v1/updates", json=seeded("mb", b, client_id="b"))
        assert_error(old, 409, "not_selected", "check in")
        checkin(live, "a", "b")
        ok = client.post("/v1/updates", json=seeded("mb", b, client_id="b"))
        assert ok.status_code == 202, ok.text
        # The claims are rebuilt from the store: a's seed still counts once.
        replay = client.post("/v1/updates", json=seeded("ma2", a, client_id="a"))
        assert_error(replay, 409, "duplicate_seed", "as message 'ma'")
        resent = client.post("/v1/updates", json=seeded("ma", a, client_id="a"))
        assert resent.status_code == 200 and resent.json()["status"] == "duplicate"
        live.process.stop()  # a graceful restart too
        live.process.start()
        checkin(live, "a", "b")
        again = client.post("/v1/updates", json=seeded("mb2", b, client_id="b"))
        assert_error(again, 409, "duplicate_seed", "as message 'mb'")
        assert status(client)["updates_in_iteration"] == 2


def test_without_server_seeds_clients_choose_seeds_and_the_attack_steers(tmp_path: Path) -> None:
    """``server_seeds = false`` (the default): the protocol is the paper's, and a client
    that shops among ``m`` seeds gets its chosen noise into the gradient estimate, at cosine
    about ``sqrt(2 ln m / d)`` with its target."""
    with serve(tmp_path, seeds_config(3, server_seeds=False)) as live:
        client = live.client
        answer, _, _ = checkin(live, "mallory", "honest", "t")
        assert set(answer) == {"selected", "round", "model_version", "deadline"}
        assert client.get("/v1/model").json()["config"]["server_seeds"] is False
        dim = make_workload(live.config).dim
        rng = np.random.default_rng(5)
        target = rng.normal(size=dim)
        target /= np.linalg.norm(target)
        best, cosine = shop(dim, target, 2000, rng)
        assert abs(cosine - math.sqrt(2 * math.log(2000) / dim)) < 0.15
        message = {"message_id": "evil", "model_version": 0, "client_id": "mallory",
                   "payload": {"seed": best, "metric": 1.0, "antithetic_metric": 0.0}}  # fmt: skip
        assert client.post("/v1/updates", json=message).status_code == 202
        binary = client.post("/v1/updates", content=es_bytes(7, 0.5, 0.5),
                             headers=binary_headers("plain", 0, client_id="honest"))  # fmt: skip
        assert binary.status_code == 202, binary.text  # the 12-byte form, as before
        token = SeedIssuer(SECRET).issue(0, "t").token
        with_token = {**message, "message_id": "tok", "client_id": "t",
                      "payload": {**message["payload"], "seed_token": token}}  # fmt: skip
        assert_error(client.post("/v1/updates", json=with_token), 422, "invalid_payload",
                     "does not issue seeds")  # fmt: skip
        assert close(live) == 1
        aggregate = closed_iteration(live.store, 0)["aggregate"]
        weighted = np.asarray(
            make_workload(live.config).strategy.aggregator.state_from_json(aggregate).weighted_noise
        )
        steered = weighted @ target / np.linalg.norm(weighted)
        assert steered == pytest.approx(cosine, abs=1e-6)  # the estimate points where chosen


def test_checkin_and_updates_never_give_a_5xx(tmp_path: Path) -> None:
    """Odd seeds, versions and tokens on every path: 4xx, never 5xx, nothing stored."""
    with serve(tmp_path, seeds_config(1)) as live:
        client = live.client
        a = checkin(live, "a")
        before = state_of(client)
        odd = [-1, 2**32, 2**64, 1.5, "1", None, True]
        for seed in odd:
            response = client.post("/v1/updates", json=seeded("o", a, client_id="a", seed=seed))
            assert 400 <= response.status_code < 500, response.text
        for version in (-1, 2**63, "0", 1):
            response = client.post("/v1/updates", json=seeded("o", a, client_id="a",
                                                                version=version))  # fmt: skip
            assert 400 <= response.status_code < 500, response.text
        for size in (0, 12, 43, 45, 4096):
            response = client.post("/v1/updates", content=b"\xff" * size,
                                   headers=binary_headers("o", 0, client_id="a"))  # fmt: skip
            assert 400 <= response.status_code < 500, response.text
        for records in (b"", b"\x00" * 43, b"\xff" * 44, struct.pack("<Iff", 1, 0.5, 0.5) * 4):
            response = post_binary_batch(live, ["o"], 0, records)
            assert 400 <= response.status_code < 500, response.text
        assert state_of(client) == before
        assert status(client)["updates_rejected_total"] >= 20
