"""Device identity in-process (docs/devices.md): the server's checks against a clock the
test sets (session expiry, clock skew, replayed session requests), the rate limits'
buckets, the attestation hook, the registry's tokens and files, and ``[identity]``'s
configuration."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from fedrank.errors import ConfigError, FedrankError
from fedrank.identity.device import DeviceAuth
from fedrank.identity.limits import TokenBuckets
from fedrank.identity.protocol import (
    HEADER,
    DeviceKey,
    b64decode,
    b64encode,
    new_nonce,
    session_challenge,
)
from fedrank.identity.registry import DeviceRegistry, EnrollmentRefused
from fedrank.server.config import load_config
from fedrank.server.envelope import BadRequest
from fedrank.server.identity import Identity, load_attestation
from tests.cli.clirun import assert_clean_failure, run

#: What the attestation test's check admits.
ATTESTED = {"platform": "genuine"}


def attest(public_key: bytes, evidence: Any) -> bool:
    """An attestation check for the tests: admits the evidence :data:`ATTESTED`; raises on
    a list (an operator's check that fails)."""
    if isinstance(evidence, list):
        raise RuntimeError("the attestation service is down")
    return len(public_key) == 32 and evidence == ATTESTED


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _identity(tmp_path: Path, toml: str = "", clock: Callable[[], float] | None = None) -> Identity:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "server.toml"
    path.write_text("[identity]\nrequired = true\n" + toml)
    config = load_config(path)
    attestation = load_attestation(config.identity.attestation)
    return Identity(config, tmp_path / "store", attestation, clock or Clock())


def _enrolled(identity: Identity, key: DeviceKey) -> None:
    (token,) = identity.registry.issue(1, "t", 1.0)
    identity.enroll({"token": token, "public_key": b64encode(key.public_bytes)}, "10.0.0.1")


def _session_body(key: DeviceKey, now: float, nonce: str | None = None) -> dict[str, Any]:
    stamp, nonce = int(now * 1000), nonce or new_nonce()
    signature = key.sign(session_challenge(key.id, stamp, nonce))
    return {"device_id": key.id, "timestamp": stamp, "nonce": nonce,
            "signature": b64encode(signature)}  # fmt: skip


def _headers(auth: DeviceAuth, body: bytes, path: str = "/v1/checkin") -> dict[str, str]:
    request = httpx.Request("POST", f"http://server{path}", content=body)
    auth.sign(request)
    return {HEADER: request.headers[HEADER]}


def _refused(call: Callable[[], Any], status: int, code: str) -> BadRequest:
    with pytest.raises(BadRequest) as refused:
        call()
    assert (refused.value.status, refused.value.code) == (status, code), refused.value.detail
    return refused.value


def test_sessions_expire_and_timestamps_must_be_near_the_servers_clock(tmp_path: Path) -> None:
    clock = Clock()
    identity = _identity(tmp_path, "session_seconds = 600.0\nmax_clock_skew_seconds = 30.0\n",
                         clock)  # fmt: skip
    key = DeviceKey.generate()
    _enrolled(identity, key)
    answer = identity.open_session(_session_body(key, clock.now), "10.0.0.1")
    assert answer["expires"] == int(clock.now + 600)
    auth = DeviceAuth(key, "http://server", clock=clock)
    auth.session = (b64decode(answer["session_key"]), answer["expires"])
    headers = _headers(auth, b"{}")
    assert identity.authenticate("POST", "/v1/checkin", headers, b"{}", "10.0.0.1") == key.id
    # the same request on another path, with another method or body: not what was signed
    for method, path, body in (("POST", "/v1/updates", b"{}"), ("GET", "/v1/checkin", b"{}"),
                               ("POST", "/v1/checkin", b"{ }")):  # fmt: skip
        _refused(lambda: identity.authenticate(method, path, headers, body, None),  # noqa: B023
                 401, "bad_signature")  # fmt: skip
    clock.now += 31  # replayed after the skew window
    _refused(lambda: identity.authenticate("POST", "/v1/checkin", headers, b"{}", None), 401,
             "stale_timestamp")  # fmt: skip
    clock.now += 600  # the session is over
    fresh = _headers(auth, b"{}")
    _refused(lambda: identity.authenticate("POST", "/v1/checkin", fresh, b"{}", None), 401,
             "session_expired")  # fmt: skip
    # an expiry the server never set (beyond session_seconds): the key is not one it derived
    device, _, stamp, mac = fresh[HEADER].split(" ")
    far = {HEADER: f"{device} {int(clock.now) + 10**6} {stamp} {mac}"}
    _refused(lambda: identity.authenticate("POST", "/v1/checkin", far, b"{}", None), 401,
             "bad_signature")  # fmt: skip
    for bad in ("", "a b c", "x " * 200, "d 1² 2 m", "d\u00e9 1 2 m"):
        _refused(lambda: identity.authenticate("POST", "/", {HEADER: bad}, b"", None),  # noqa: B023
                 401, "bad_signature")  # fmt: skip


def test_a_session_request_is_signed_fresh_and_used_once(tmp_path: Path) -> None:
    clock = Clock()
    identity = _identity(tmp_path, clock=clock)
    key, other = DeviceKey.generate(), DeviceKey.generate()
    _enrolled(identity, key)
    body = _session_body(key, clock.now)
    identity.open_session(body, None)
    _refused(lambda: identity.open_session(body, None), 401, "replayed")
    forged = {**_session_body(key, clock.now), "signature": body["signature"]}
    _refused(lambda: identity.open_session(forged, None), 401, "bad_signature")
    _refused(lambda: identity.open_session(_session_body(other, clock.now), None), 401, "revoked")
    _refused(lambda: identity.open_session(_session_body(key, clock.now - 3600), None), 401,
             "stale_timestamp")  # fmt: skip
    for bad in (None, [], {"device_id": key.id}, {**body, "timestamp": True},
                {**body, "nonce": "short"}, {**body, "signature": "!!"},
                {**body, "device_id": 7}):  # fmt: skip
        _refused(lambda: identity.open_session(bad, None), 422, "invalid")  # noqa: B023


def test_rate_limits_refill_at_their_rate(tmp_path: Path) -> None:
    clock = Clock(0.0)
    buckets = TokenBuckets(rate=2.0, burst=3, max_keys=2, clock=clock)
    assert [buckets.take("a") for _ in range(3)] == [0.0] * 3
    assert buckets.take("a") == pytest.approx(0.5)  # refused: the next token in 0.5 s
    clock.now = 0.5
    assert buckets.take("a") == 0.0
    assert buckets.take("b") == 0.0 and buckets.take("c") == 0.0  # "a" dropped (max_keys)
    assert buckets.take("a") == 0.0  # a full bucket again
    assert TokenBuckets(rate=0, burst=1).take("x") == 0.0  # off
    # a device over its limit: 429 after its burst, whatever address it uses
    identity = _identity(tmp_path, "device_rate = 1.0\ndevice_burst = 2\naddress_rate = 0\n")
    key = DeviceKey.generate()
    _enrolled(identity, key)
    answer = identity.open_session(_session_body(key, identity.clock()), None)  # one token
    auth = DeviceAuth(key, "http://server", clock=identity.clock)
    auth.session = (b64decode(answer["session_key"]), answer["expires"])
    assert identity.authenticate("POST", "/v1/checkin", _headers(auth, b""), b"", "1.1.1.1")
    limited = _refused(
        lambda: identity.authenticate("POST", "/v1/checkin", _headers(auth, b""), b"", "2.2.2.2"),
        429,
        "rate_limited",
    )
    assert "this device" in limited.detail


def test_the_address_limit_pays_for_refusals_not_for_enrolled_devices(tmp_path: Path) -> None:
    """Enrolled devices behind one address are held to their own limits; requests that
    identity refuses spend the address's bucket: 401s, then 429s."""
    identity = _identity(tmp_path, "address_rate = 1.0\naddress_burst = 3\n")
    auths = []
    for _ in range(3):
        key = DeviceKey.generate()
        _enrolled(identity, key)  # enrollment takes an address token (not this test's address)
        answer = identity.open_session(_session_body(key, identity.clock()), "10.0.0.2")
        auth = DeviceAuth(key, "http://server", clock=identity.clock)
        auth.session = (b64decode(answer["session_key"]), answer["expires"])
        auths.append(auth)
    for _ in range(5):  # 15 authenticated requests from one address with a burst of 3
        for auth in auths:
            headers = _headers(auth, b"{}")
            assert identity.authenticate("POST", "/v1/checkin", headers, b"{}", "10.0.0.9")
    forged = dict(_headers(auths[0], b"{}"))
    device, expires, stamp, mac = forged[HEADER].split(" ")
    forged[HEADER] = f"{device} {expires} {stamp} {'0' * len(mac)}"

    def forge() -> Any:
        return identity.authenticate("POST", "/v1/checkin", forged, b"{}", "10.0.0.9")

    codes = [_refused(forge, 401, "bad_signature").status for _ in range(3)]
    assert codes == [401] * 3
    _refused(forge, 429, "rate_limited")
    unsigned = {"content-type": "application/json"}
    _refused(lambda: identity.authenticate("POST", "/v1/checkin", unsigned, b"{}", "10.0.0.9"),
             429, "rate_limited")  # fmt: skip


def test_attestation_admits_a_device_without_a_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    identity = _identity(tmp_path, f'attestation = "{__name__}:attest"\n')
    key = DeviceKey.generate()
    public = b64encode(key.public_bytes)
    assert identity.enroll({"public_key": public, "evidence": ATTESTED}, None) == key.id
    assert identity.public_key(key.id) == key.public_bytes
    other = b64encode(DeviceKey.generate().public_bytes)
    _refused(lambda: identity.enroll({"public_key": other, "evidence": {}}, None), 401,
             "enrollment_refused")  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="fedrank.server"):
        _refused(lambda: identity.enroll({"public_key": other, "evidence": []}, None), 401,
                 "enrollment_refused")  # fmt: skip
    assert "attestation raised" in caplog.text
    without = _identity(tmp_path / "plain")  # no attestation: a token is needed
    _refused(lambda: without.enroll({"public_key": other, "evidence": ATTESTED}, None), 401,
             "enrollment_refused")  # fmt: skip
    for bad in ("no_such_module_here:check", f"{__name__}:missing", f"{__name__}:ATTESTED"):
        with pytest.raises(ConfigError, match="attestation"):
            _identity(tmp_path / "bad", f'attestation = "{bad}"\n')


def test_the_registry_keeps_hashed_tokens_and_a_private_file(tmp_path: Path) -> None:
    registry = DeviceRegistry(tmp_path)
    (token,) = registry.issue(1, "lab", 1.0)
    assert (tmp_path / "devices.sqlite").stat().st_mode & 0o777 == 0o600
    assert token.encode() not in (tmp_path / "devices.sqlite").read_bytes()
    stored = registry.db.execute("SELECT hash FROM tokens").fetchall()
    assert stored and token not in stored[0][0]
    key = DeviceKey.generate()
    device = registry.enroll(token, key.public_bytes)
    (expired,) = registry.issue(1, "lab", 1.0)
    registry.db.execute("UPDATE tokens SET expires = 0 WHERE device IS NULL")
    registry.db.commit()
    with pytest.raises(EnrollmentRefused, match="expired"):
        registry.enroll(expired, DeviceKey.generate().public_bytes)
    assert registry.revoke(device) and not registry.revoke(device)
    (again,) = registry.issue(1, "lab", 1.0)
    with pytest.raises(EnrollmentRefused, match="revoked"):
        registry.enroll(again, key.public_bytes)
    for count, hours in ((0, 1.0), (10_001, 1.0), (1, 0.0), (1, 10**6)):
        with pytest.raises(FedrankError):
            registry.issue(count, "", hours)
    registry.close()
    path = tmp_path / "key" / "device.key"
    first = DeviceKey.load_or_create(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert DeviceKey.load_or_create(path).id == first.id  # kept
    path.write_bytes(b"short")
    with pytest.raises(FedrankError, match="not a device key"):
        DeviceKey.load_or_create(path)


def test_identity_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def config(text: str) -> Any:
        path = tmp_path / "c.toml"
        path.write_text(text)
        return load_config(path)

    assert config("").identity_required is False
    rounds = '[server]\nworkload = "fedavg"\n[rounds]\nenabled = true\n'
    assert config(rounds).identity_required is True
    private = "[privacy]\nepsilon = 1.0\nclip = 1.0\nrounds = 10\n"
    assert config(private).identity_required is True
    assert config("[identity]\nrequired = true\n").identity_required is True
    off = config(rounds + "[identity]\nrequired = false\n")
    assert off.identity_required is False
    with caplog.at_level(logging.WARNING, logger="fedrank.server"):
        Identity(off, tmp_path / "store").close()
    assert "required = false with [rounds]" in caplog.text
    for text, message in (
        ('required = "yes"', "required must be one of auto, True, False, got 'yes'"),
        ("device_rate = 0.5", "device_rate (requests/s; 0: off) must be 0 or >= 1"),
        ("session_seconds = 1.0", "session_seconds must be in [10, 86400]"),
        ('attestation = "nope"', "attestation must be 'module:function'"),
        ("unknown = 1", "unknown key(s) unknown in [identity]"),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
                           .replace("[", r"\[").replace("]", r"\]")):  # fmt: skip
            config(f"[identity]\n{text}\n")


def test_a_bad_attestation_stops_the_server_at_start_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text('[identity]\nattestation = "no_such_module_here:check"\n')
    args = ["serve", "--config", str(path), "--store", str(tmp_path / "store"), "--port", "0"]
    assert_clean_failure(run(args), "[identity] attestation = 'no_such_module_here:check' cannot")
