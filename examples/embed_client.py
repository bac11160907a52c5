"""Embedding the client SDK (:mod:`fedrank.client`) in an application.

An application that trains a shared model with fedrank does four things, each a call of
:class:`fedrank.client.Client`: make the client (once per device, with the operator's
enrollment token the first time: ``fedrank devices enroll``), ``checkin()`` to ask for a
seat in the round, ``fetch_model()``, then train on the device's own data and
``send_update()`` what the system's client half (``client_half(model)``) made of the
result. Nothing but the update leaves the device.

Here each device is a thread holding a small private regression problem (its own data,
drawn from its seed); the server runs the ``fedavg`` workload with rounds (``[rounds]
enabled = true``). Start one, enroll devices, then run this script::

    fedrank serve --config server.toml          # [server] workload = "fedavg", [rounds] ...
    fedrank devices enroll --store STORE --count 3
    python examples/embed_client.py --server http://127.0.0.1:8000 --token T1 --token T2 ...

It prints what each device did in each round and the model the server ended with.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrank.client import Client


@dataclass
class Device:
    """One application install: its SDK client and the data it keeps to itself."""

    name: str
    client: Client
    features: np.ndarray
    targets: np.ndarray

    def train(self, params: np.ndarray, steps: int = 20, learning_rate: float = 0.1) -> np.ndarray:
        """Local gradient descent on the device's least-squares problem, from ``params``."""
        weights = params.copy()
        for _ in range(steps):
            residual = self.features @ weights - self.targets
            weights -= learning_rate * 2.0 * self.features.T @ residual / len(self.targets)
        return weights

    def take_part(self) -> str:
        """One round from this device's side: check in, and if seated fetch the model,
        train, send the update. Returns a line saying what happened."""
        seat = self.client.checkin()
        if not seat.selected:
            return f"{self.name}: not seated this round"
        model = self.client.fetch_model()
        trained = self.train(model.params)
        half = self.client.client_half(model)
        message = half.message(model.params, trained, len(self.targets))
        result = self.client.send_update(model, message, client_id=seat.client_id)
        return f"{self.name}: model version {model.version} -> update {result.status}"


def make_devices(
    server: str, tokens: list[str], dim: int, state_root: Path, seed: int
) -> list[Device]:
    """One :class:`Device` per enrollment token, each with its own state directory (its
    enrollment id, device key and offline queue) and its own data around a shared truth."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=dim)
    devices = []
    for i, token in enumerate(tokens):
        features = rng.normal(size=(50, dim))
        targets = features @ truth + 0.1 * rng.normal(size=50)
        client = Client(server, state_dir=state_root / f"device-{i}", enrollment_token=token)
        devices.append(Device(f"device {i}", client, features, targets))
    return devices


def wait_for_version(client: Client, version: int, timeout: float) -> None:
    """Poll the served model (a cached ``304`` when nothing changed) until the server has
    closed the round and published ``version``."""
    deadline = time.monotonic() + timeout
    while client.fetch_model().version < version:
        if time.monotonic() > deadline:
            raise SystemExit(f"the round did not close within {timeout:g} s")
        time.sleep(0.1)


def main() -> None:
    """Parse the arguments and run the devices for ``--rounds`` rounds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="the server's URL")
    parser.add_argument(
        "--token", action="append", required=True, help="an enrollment token (one per device)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds to take part in")
    parser.add_argument("--seed", type=int, default=0, help="the devices' data")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="longest wait for a round to close (s)"
    )
    parser.add_argument(
        "--state", type=Path, default=None, help="where devices keep their state (default: temp)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        state_root = args.state or Path(scratch)
        probe = Client(args.server, state_dir=state_root / "probe")
        dim = len(probe.fetch_model().params)
        probe.close()
        devices = make_devices(args.server, args.token, dim, state_root, args.seed)
        try:
            with ThreadPoolExecutor(max_workers=len(devices)) as pool:
                for r in range(1, args.rounds + 1):
                    lines = list(pool.map(Device.take_part, devices))
                    print(f"round {r}: " + "; ".join(lines))
                    wait_for_version(devices[0].client, r, args.timeout)
            final = devices[0].client.fetch_model()
            print(f"final model version {final.version}: {np.round(final.params, 3).tolist()}")
        finally:
            for device in devices:
                device.client.close()


if __name__ == "__main__":
    main()
