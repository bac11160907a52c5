"""``fedrank devices enroll|list|revoke``: the operator's side of device identity
(docs/devices.md), on the store's ``devices.sqlite`` (works while the server runs)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from fedrank.cli._common import FedrankGroup

_STORE = click.option(
    "--store",
    "store_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The server's store directory (devices.sqlite lives there).",
)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(seconds))


@click.group("devices", cls=FedrankGroup)
def devices() -> None:
    """Enroll, list and revoke the devices a server accepts."""


@devices.command("enroll", short_help="Print single-use enrollment tokens.")
@_STORE
@click.option("--count", type=int, default=1, show_default=True, help="Tokens to issue.")
@click.option("--label", default="", help="A note kept with the tokens and their devices.")
@click.option(
    "--expires-hours",
    type=float,
    default=24.0,
    show_default=True,
    help="Each token admits one device before this many hours pass.",
)
def devices_enroll(store_dir: Path, count: int, label: str, expires_hours: float) -> None:
    """Print single-use enrollment tokens, one a line (give one to each device: `fedrank
    client --enrollment-token`, or the SDK's enrollment_token)."""
    from fedrank.identity.registry import DeviceRegistry

    registry = DeviceRegistry(store_dir)
    try:
        for token in registry.issue(count, label, expires_hours):
            click.echo(token)
    finally:
        registry.close()


@devices.command("list", short_help="List the enrolled devices.")
@_STORE
def devices_list(store_dir: Path) -> None:
    """Every enrolled device: id, label, enrolled, revoked, last seen (its last session)."""
    from fedrank.identity.registry import DeviceRegistry

    registry = DeviceRegistry(store_dir)
    try:
        rows = registry.devices()
    finally:
        registry.close()
    click.echo(f"{'device':32}  {'label':16}  {'enrolled':20}  {'revoked':20}  last seen")
    for d in rows:
        click.echo(
            f"{d.id:32}  {d.label[:16]:16}  {_when(d.enrolled):20}  {_when(d.revoked):20}  "
            f"{_when(d.last_seen)}"
        )


@devices.command("revoke", short_help="Revoke a device.")
@_STORE
@click.argument("device_id")
def devices_revoke(store_dir: Path, device_id: str) -> None:
    """Revoke a device: the server refuses it from its next request on."""
    from fedrank.errors import FedrankError
    from fedrank.identity.registry import DeviceRegistry

    registry = DeviceRegistry(store_dir)
    try:
        done = registry.revoke(device_id)
    finally:
        registry.close()
    if not done:
        raise FedrankError(
            f"no enrolled, unrevoked device {device_id!r} in {store_dir} "
            "(see `fedrank devices list`)"
        )
    click.echo(f"revoked {device_id}")
