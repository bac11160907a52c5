"""Secure aggregation against clients that lie, on a real server over loopback (issue 51,
findings 4 and 5 and the threshold part of 10; docs/secagg.md, "Clients that lie"): a
member replaying another's keys gets 409 and the round goes on; a member zeroing its
encrypted shares is excluded and reported while the honest members' sum is published; a
proxy naming a cohort client it has no signed input from is refused (naming it) and the
client's own input is still accepted; an unclipped input gets the round refused with the
reason, and the next round is unaffected; a threshold below a majority needs an explicit
override, which is logged. Every member is an enrolled device (the server requires them
with [secagg]): an advert signed with any key but its device's gets 403, and SDK devices
sign with theirs."""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedrank.client import Client
from fedrank.client.sdk import ClientError
from fedrank.client.secagg import send_secure
from fedrank.errors import ConfigError
from fedrank.secagg import signing, wire
from fedrank.secagg.client import SecAggClient
from fedrank.secagg.field import FixedPointEncoder
from fedrank.secagg.messages import MaskedSum
from fedrank.secagg.protocol import SecAggParams
from tests.server.serverkit import (
    NamedDevices,
    assert_error,
    issue_tokens,
    live_server,
    offline_config,
    status,
    wait_until,
)
from tests.server.test_server_secagg import (
    DIM,
    PROXIES_TOML,
    PROXY_TOKENS,
    TOML,
    K,
    _assert_step_is_the_clear_mean,
    _client_run,
    _deltas,
)

#: Seconds between a hand-driven member's polls: within ``[identity] device_rate`` (10/s).
POLL = 0.2


def _toml(k: int) -> str:
    """A cohort of ``k``; every member sends at every stage, so a stage closes when all have
    sent, and its deadline is only a bound that a busy machine must not reach."""
    toml = TOML.replace(f"clients_per_round = {K}", f"clients_per_round = {k}")
    return toml.replace("stage_seconds = 12.0", "stage_seconds = 90.0")


class Member:
    """A cohort member that runs the protocol by hand (the library's client and wire forms
    over HTTP), so that a test can make it lie at one stage. It is the enrolled device that
    ``http`` (a :func:`live_server`'s client, :class:`NamedDevices`) signs its requests as,
    and signs its advert and masked input with that device's key."""

    def __init__(self, http: httpx.Client, name: str) -> None:
        """Check in; :meth:`join` waits for the round's draw."""
        devices = http.auth
        assert isinstance(devices, NamedDevices)
        self.http, self.name = http, name
        self.device_id = devices.id(name)
        self.key = devices.device(name).key.private_key
        self.answer = self._checkin()

    def _checkin(self) -> dict[str, Any]:
        answer = self.http.post("/v1/checkin", json={"client_id": self.name})
        assert answer.status_code == 200, answer.text
        return answer.json()

    def join(self) -> Member:
        """Wait until the check-in window's draw has seated this member (every test's cohort
        is exactly K check-ins, so all are seated) and take its secure-aggregation block."""
        answer = self.answer
        if not answer["selected"]:
            answer = wait_until(
                lambda: (a := self._checkin())["selected"] and a,
                timeout=60,
                interval=POLL,
                what=f"{self.name}'s seat",
            )
        block = answer["secagg"]
        self.ident = {"client_id": self.name, "session": block["session"]}
        params = SecAggParams(
            base64.b64decode(block["session"]), block["threshold"], block["dimension"]
        )
        self.encoder = FixedPointEncoder(
            block["scale"], block["max_clients"], l2_bound=block["l2_bound"]
        )
        self.id = int(block["id"])
        self.me = SecAggClient(self.id, params, signing_key=self.key)
        return self

    def view(self) -> dict[str, Any]:
        answer = self.http.get("/v1/secagg", params=self.ident)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def wait(self, stage: str) -> dict[str, Any]:
        return wait_until(
            lambda: (v := self.view())["stage"] == stage and v,
            timeout=60,
            interval=POLL,
            what=f"{self.name} at {stage}",
        )

    def post(self, stage: str, message: dict[str, Any]) -> httpx.Response:
        return self.http.post("/v1/secagg", json={**self.ident, "stage": stage, "message": message})

    def run(
        self,
        encoded: np.ndarray,
        *,
        shares: Callable[[dict[str, Any]], dict[str, Any]] = lambda message: message,
    ) -> None:
        """Every stage from the advert on, honestly but for ``shares`` (applied to its
        share_keys message) and ``encoded`` (its input, encoded by the caller)."""
        assert self.post("advertise", wire.advertise_to_json(self.me.advertise_keys())).is_success
        directory = wire.directory_from_json(self.wait("share_keys")["directory"], 10)
        message = shares(wire.share_keys_to_json(self.me.share_keys(directory)))
        assert self.post("share_keys", message).is_success
        forwarded = wire.forwarded_from_json(self.wait("check_shares")["forwarded"], 10)
        check = wire.share_check_to_json(self.me.check_shares(forwarded))
        assert self.post("check_shares", check).is_success
        masking = wire.masking_from_json(self.wait("masked_input")["masking"], 10)
        masked = wire.masked_to_json(self.me.masked_input(masking, encoded))
        assert self.post("masked_input", masked).is_success
        request = wire.request_from_json(self.wait("unmasking")["contributors"], 10)
        assert self.post("unmasking", wire.unmasking_to_json(self.me.unmask(request))).is_success


def test_a_member_replaying_anothers_keys_is_refused_and_the_round_goes_on(
    tmp_path: Path,
) -> None:
    """Finding 4: a second id advertising keys already in the directory was accepted (202)
    and made every honest client abort. Now: 409 naming the owner of the keys; the member
    may still advertise its own, and the round publishes the three members' sum."""
    k = 3
    with live_server(tmp_path, _toml(k)) as live:
        a, b, c = (Member(live.client, f"member-{i}") for i in range(k))
        for member in (a, b, c):
            member.join()
        advert = a.me.advertise_keys()
        assert a.post("advertise", wire.advertise_to_json(advert)).status_code == 202
        own = c.me.advertise_keys()
        replay = wire.advertise_to_json(own) | {
            "mask_public_key": base64.b64encode(advert.mask_public_key).decode(),
            "share_public_key": base64.b64encode(advert.share_public_key).decode(),
        }
        digest = signing.advertise_digest(  # signed properly, with c's own device key
            advert.mask_public_key, advert.share_public_key, signing.public_bytes(c.key)
        )
        replay["signature"] = base64.b64encode(
            signing.sign(
                c.key,
                session_id=c.me.params.session_id,
                sender=c.id,
                stage="AdvertiseKeys",
                digest=digest,
            )
        ).decode()
        assert_error(c.post("advertise", replay), 409, "secagg_duplicate_keys", f"of client {a.id}")
        # c's own keys are accepted; then everyone runs the protocol to the end
        deltas = {m.id: _deltas()[i] * 0.5 for i, m in enumerate((a, b, c))}
        members = (a, b, c)
        assert c.post("advertise", wire.advertise_to_json(own)).status_code == 202
        assert b.post("advertise", wire.advertise_to_json(b.me.advertise_keys())).is_success
        for stage in ("share_keys", "check_shares", "masked_input", "unmasking"):
            for m in members:
                view = m.wait(stage)
                message = _honest(m, stage, view, m.encoder.encode(deltas[m.id]))
                assert m.post(stage, message).status_code == 202, stage
        wait_until(lambda: live.version() == 1, timeout=60, what="the round's close")
        assert status(live.client)["secagg"]["previous"]["stage"] == "finished"


def test_a_device_must_advertise_its_enrolled_key_and_sdk_devices_finish(tmp_path: Path) -> None:
    """Finding 3 (Sybils): an advert's signing key was bound to whoever sent it first, so a
    member could sign with any key. Now the server requires enrolled devices with [secagg]
    and checks each advert against the device's enrolled key: one signed with another key
    gets 403 `secagg_wrong_key`; the SDK signs with the device's key by default, and the
    round of three SDK devices publishes their mean."""
    k = 3
    deltas = _deltas()[:k]
    with live_server(tmp_path, _toml(k)) as live:
        url = live.process.url
        params0 = np.array(live.client.get("/v1/model").json()["params"])
        tokens = issue_tokens(live.store, k)
        refusals: list[ClientError] = []

        def run(i: int) -> str:
            with Client(url, rng=np.random.default_rng(i), enrollment_token=tokens[i]) as client:
                checkin = client.checkin()
                if i == 0:
                    other = signing.generate_signing_key()
                    with pytest.raises(ClientError) as refused:
                        send_secure(client, checkin, deltas[i], signing_key=other)
                    refusals.append(refused.value)
                report = send_secure(client, checkin, deltas[i], poll_seconds=0.05)
                return report.outcome or report.sent

        with ThreadPoolExecutor(max_workers=k) as pool:
            outcomes = list(pool.map(run, range(k)))
        wait_until(lambda: live.version() == 1, timeout=60, what="the round's close")
        params1 = np.array(live.client.get("/v1/model").json()["params"])
    (refused,) = refusals
    assert (refused.status, refused.body["error"]) == (403, "secagg_wrong_key")
    assert "not this device's enrolled key" in refused.body["detail"]
    assert outcomes == ["finished"] * k
    _assert_step_is_the_clear_mean(params1 - params0, deltas, k)


def _honest(m: Member, stage: str, view: dict[str, Any], encoded: np.ndarray) -> dict[str, Any]:
    """``m``'s honest message of ``stage`` (after its advert)."""
    if stage == "share_keys":
        directory = wire.directory_from_json(view["directory"], 10)
        return wire.share_keys_to_json(m.me.share_keys(directory))
    if stage == "check_shares":
        forwarded = wire.forwarded_from_json(view["forwarded"], 10)
        return wire.share_check_to_json(m.me.check_shares(forwarded))
    if stage == "masked_input":
        masking = wire.masking_from_json(view["masking"], 10)
        return wire.masked_to_json(m.me.masked_input(masking, encoded))
    request = wire.request_from_json(view["contributors"], 10)
    return wire.unmasking_to_json(m.me.unmask(request))


def test_a_member_zeroing_its_shares_is_excluded_and_the_honest_sum_published(
    tmp_path: Path,
) -> None:
    """Finding 4: one cohort member sending zeroed share ciphertexts made every honest
    client fail AES-GCM and the round abort. Now the three honest SDK clients name it at
    the share check, the server excludes it (status and log say so), refuses its masked
    input, and publishes the honest members' sum."""
    k = 4
    deltas = _deltas()[:k]
    with live_server(tmp_path, _toml(k)) as live:
        url = live.process.url
        params0 = np.array(live.client.get("/v1/model").json()["params"])
        liar = Member(live.client, "liar")
        tokens = issue_tokens(live.store, k)

        def zeroed(message: dict[str, Any]) -> dict[str, Any]:
            size = wire.CIPHERTEXT_BYTES
            zero = base64.b64encode(bytes(size)).decode()
            return {**message, "ciphertexts": dict.fromkeys(message["ciphertexts"], zero)}

        with ThreadPoolExecutor(max_workers=k - 1) as pool:
            runs = [pool.submit(_client_run, url, tokens[i], i, deltas[i]) for i in range(1, k)]
            me = liar.join().me
            assert liar.post("advertise", wire.advertise_to_json(me.advertise_keys())).is_success
            directory = wire.directory_from_json(liar.wait("share_keys")["directory"], k)
            shares = zeroed(wire.share_keys_to_json(me.share_keys(directory)))
            assert liar.post("share_keys", shares).status_code == 202
            liar.wait("check_shares")
            assert liar.post("check_shares", {"sender": liar.id, "rejected": []}).is_success
            wait_until(lambda: liar.view()["stage"] != "check_shares", what="the check's close")
            vector = base64.b64encode(bytes(4 * DIM)).decode()
            masked = {"sender": liar.id, "masked": vector, "signature": "A" * 86 + "=="}
            refused = liar.post("masked_input", masked)  # U2 has moved on without it
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"] in ("secagg_dropped", "secagg_wrong_stage")
            outcomes = [run.result() for run in runs]
        final = wait_until(  # the model, then the round's summary, are published
            lambda: (
                (s := status(live.client))["model_version"] == 1
                and s["secagg"]["previous"] is not None
                and s
            ),
            timeout=60,
            what="the close of the round without the liar",
        )
        params1 = np.array(live.client.get("/v1/model").json()["params"])
    assert outcomes == ["finished"] * (k - 1)
    assert final["secagg"]["previous"]["excluded"] == [liar.id]
    assert final["updates_counted_total"] == k - 1
    _assert_step_is_the_clear_mean(params1 - params0, deltas[1:], k)
    log = live.process.log.read_text()
    assert f"excluded {liar.device_id}" in log and "aborted" not in log


def test_a_proxy_cannot_name_a_sender_that_did_not_sign_and_the_sender_still_counts(
    tmp_path: Path,
) -> None:
    """Finding 5: an authenticated proxy named a cohort client as its sender; the real
    client's input was then refused (409) and a random step was published. Now the sum is
    refused (403, naming the client: it carries no signature of that client's), the client's
    own masked input is accepted, and the model is the clear mean of the three members."""
    k = 3
    deltas = _deltas()[:k]
    auth = {"Authorization": f"Bearer {PROXY_TOKENS['a']}"}
    with live_server(tmp_path, _toml(k) + PROXIES_TOML) as live:
        url = live.process.url
        params0 = np.array(live.client.get("/v1/model").json()["params"])
        tokens = issue_tokens(live.store, k)
        attempts: list[httpx.Response] = []
        victims: list[int] = []

        def forge_then_send(client: Client, body: dict[str, Any]) -> None:
            """Client 2's masked input is ready: the rogue proxy claims client 2 first (a
            random vector, signed with the proxy's own key), then the client sends (signed
            as its device)."""
            victim = int(body["message"]["sender"])
            vector = np.random.default_rng(0).integers(0, 2**32, DIM, dtype=np.uint64)
            digest = signing.masked_digest(vector)
            key = signing.generate_signing_key()
            forged = MaskedSum((victim,), vector, (digest,), (key.sign(digest),))
            claim = {"session": body["session"], "stage": "masked_sum",
                     "message": wire.masked_sum_to_json(forged)}  # fmt: skip
            victims.append(victim)
            attempts.append(live.client.post("/v1/secagg", json=claim, headers=auth))
            own = live.client.post("/v1/secagg", json=body, auth=client.device.auth)
            attempts.append(own)

        def run(i: int) -> str:
            with Client(url, rng=np.random.default_rng(i), enrollment_token=tokens[i]) as client:
                checkin = client.checkin()
                report = send_secure(
                    client, checkin, deltas[i], poll_seconds=0.05,
                    masked_input_to=functools.partial(forge_then_send, client) if i == 2 else None,
                )  # fmt: skip
                return report.outcome or report.sent

        with ThreadPoolExecutor(max_workers=k) as pool:
            outcomes = list(pool.map(run, range(k)))
        wait_until(lambda: live.version() == 1, timeout=60, what="the round's close")
        params1 = np.array(live.client.get("/v1/model").json()["params"])
    claim, own = attempts
    detail = f"client {victims[0]}'s MaskedInputCollection"
    assert_error(claim, 403, "secagg_bad_signature", detail)
    assert own.status_code == 202, own.text
    assert outcomes == ["finished"] * k
    _assert_step_is_the_clear_mean(params1 - params0, deltas, k)


def test_an_unclipped_input_gets_the_round_refused_and_the_next_round_is_unaffected(
    tmp_path: Path,
) -> None:
    """Finding 5: a member encoding an unclipped delta (1.5 per coordinate, norm 4.2, where
    every delta is clipped to 1) moved the published model beyond what clipped deltas can.
    Now the decoded sum's norm exceeds 3 x l2_bound: the round is refused with the reason
    (status, log), nothing is published, and the next round of honest clients is."""
    k = 3
    small = _deltas()[:k] * 0.05  # honest: norms at most 0.09
    with live_server(tmp_path, _toml(k)) as live:
        url = live.process.url
        params0 = np.array(live.client.get("/v1/model").json()["params"])
        attacker = Member(live.client, "attacker")
        tokens = issue_tokens(live.store, 2 * k)
        with ThreadPoolExecutor(max_workers=k - 1) as pool:
            runs = [pool.submit(_client_run, url, tokens[i], i, small[i]) for i in range(1, k)]
            attacker.join()
            big = np.rint(attacker.encoder.scale * np.full(DIM, 1.5)).astype(np.int64)
            attacker.run(big.astype(np.uint64) & np.uint64(2**32 - 1))
            refusals = [run.exception() for run in runs]
        first = wait_until(
            lambda: (s := status(live.client))["secagg"]["round"] == 1 and s,
            timeout=60,
            what="the refused round's end",
        )
        assert first["model_version"] == 0 and first["updates_accepted_total"] == 0
        reason = first["secagg"]["previous"]["reason"]
        assert first["secagg"]["previous"]["stage"] == "aborted"
        assert "L2 norm" in reason and "did not clip" in reason
        assert all("did not clip" in str(exc) for exc in refusals), refusals
        with ThreadPoolExecutor(max_workers=k) as pool:
            next_round = pool.map(
                lambda i: _client_run(url, tokens[k + i], 10 + i, small[i]), range(k)
            )
            outcomes = list(next_round)
        wait_until(lambda: live.version() == 1, timeout=60, what="the next round's close")
        params1 = np.array(live.client.get("/v1/model").json()["params"])
    assert outcomes == ["finished"] * k
    _assert_step_is_the_clear_mean(params1 - params0, small, k)
    assert "did not clip" in live.process.log.read_text()


def test_a_threshold_below_a_majority_needs_an_override_which_is_logged(tmp_path: Path) -> None:
    """Issue 51, finding 10: `[secagg] threshold` could be 2 for any K. Now it must be at
    least K // 2 + 1 unless allow_low_threshold = true, and the server logs a warning."""
    low = _toml(5).replace("l2_bound = 1.0\n", "l2_bound = 1.0\nthreshold = 2\n")
    with pytest.raises(ConfigError, match=r"at least a majority .*3 of 5.*allow_low_threshold"):
        offline_config(low, tmp_path)
    offline_config(low.replace("threshold = 2\n", "threshold = 3\n"), tmp_path)
    allowed = low.replace("threshold = 2\n", "threshold = 2\nallow_low_threshold = true\n")
    with live_server(tmp_path, allowed) as live:
        members = [Member(live.client, f"m{i}") for i in range(5)]
        block = members[0].join().ident
        assert block["session"]
    log = live.process.log.read_text()
    assert "threshold t=2 is below a majority of the cohort (3 of K=5" in log
