"""The SDK's offline queue is safe across threads and processes (issue 15, F8): two
``Client`` objects sharing one ``state_dir`` -- one sending while the other flushes --
once lost an update (the flush rewrote the queue it had read); now every queued message
stays until a flush settles it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from fedrank.client.sdk import Client


def _closed_port() -> str:
    """A loopback URL where nothing listens (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    from fedrank.client.sdk import Client
    role, url, state, n = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    client = Client(url, state_dir=state, max_attempts=1, backoff=0.0,
                    rng=np.random.default_rng(0))
    ready, done = state / "flusher-ready", state / "sender-done"
    if role == "flush":  # flush over and over while the other process sends
        ready.touch()
        deadline = time.time() + 60  # the sender may have failed: stop anyway
        while not done.exists() and time.time() < deadline:
            client.flush()
    else:
        while not ready.exists():
            time.sleep(0.01)
        for i in range(n):
            assert client.send({}, 0, message_id=f"m-{i}").status == "queued"
        done.touch()
    """
)


def test_two_processes_sharing_a_queue_lose_nothing(tmp_path: Path) -> None:
    url, state, n = _closed_port(), tmp_path / "state", 200
    Client(url, state_dir=state, rng=np.random.default_rng(1)).close()  # enroll once
    procs = [
        subprocess.Popen([sys.executable, "-c", SCRIPT, role, url, str(state), str(n)])
        for role in ("flush", "send")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with Client(url, state_dir=state, max_attempts=1, backoff=0.0) as client:
        ids = [m["message_id"] for m in client.queued()]
    assert ids == [f"m-{i}" for i in range(n)]  # all of them, in the order they were queued


def test_a_queue_of_the_earlier_format_is_taken_over(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    old = [{"message_id": f"old-{i}", "model_version": 0, "payload": {}} for i in range(3)]
    (state / "outbox.jsonl").write_text("".join(json.dumps(m) + "\n" for m in old))
    with Client(_closed_port(), state_dir=state, max_attempts=1, backoff=0.0) as client:
        assert client.queued() == old
        assert not (state / "outbox.jsonl").exists()
        client.send({}, 0, message_id="new-0")
        assert [m["message_id"] for m in client.queued()] == ["old-0", "old-1", "old-2", "new-0"]


def test_without_a_state_dir_the_queue_is_kept_in_memory(tmp_path: Path) -> None:
    with Client(_closed_port(), max_attempts=1, backoff=0.0) as client:
        assert client.send({}, 0, message_id="kept").status == "queued"
        assert client.send({}, 0, message_id="kept").status == "queued"  # same id, once
        assert [m["message_id"] for m in client.queued()] == ["kept"]
        assert client.flush() == [] and len(client.queued()) == 1  # still unreachable


def test_clients_sharing_a_state_dir_share_one_enrollment(tmp_path: Path) -> None:
    ids = {
        Client(_closed_port(), state_dir=tmp_path, rng=np.random.default_rng(seed)).enrollment_id
        for seed in range(3)
    }
    assert len(ids) == 1
