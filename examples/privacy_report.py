"""A privacy report through the library: what ``fedrank privacy report`` computes.

Three deployments a team might weigh, each as the server configuration it would run
(:func:`fedrank.server.config.load_config`, the same validation ``fedrank serve`` applies),
and the guarantee fedrank reports for it (:func:`fedrank.server.privacy.report_config`):

* FOLtR-ES (Kharitonov, WSDM 2019): each client privatizes its MaxRR values by randomized
  response with probability ``p`` of the true value; a pure epsilon per message (Eq. 10)
  that adds up over the rounds a client takes part in;
* FedAvg with central differential privacy (``[privacy]``): the server clips every update
  and adds Gaussian noise calibrated so that a user's epsilon over the planned rounds stays
  within the budget (accounted by ``dp_accounting``);
* the same FedAvg server without ``[privacy]``: no guarantee, said plainly.

Run::

    python examples/privacy_report.py --rounds 20 --epsilon 3 --p 0.9
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from fedrank.privacy.report import SystemPrivacy
from fedrank.server.config import load_config
from fedrank.server.privacy import report_config


def deployments(rounds: int, epsilon: float, delta: float, p: float) -> dict[str, str]:
    """Each deployment's ``server.toml``."""
    return {
        "FOLtR-ES, randomized response": (
            f'[server]\nworkload = "foltr-es"\n[foltr_es]\np = {p}\nbatch = 4\n'
        ),
        "FedAvg, central DP": (
            '[server]\nworkload = "fedavg"\n[fedavg]\ndim = 10\n'
            f"[privacy]\nepsilon = {epsilon}\ndelta = {delta}\nclip = 0.5\nrounds = {rounds}\n"
        ),
        "FedAvg, no DP": '[server]\nworkload = "fedavg"\n[fedavg]\ndim = 10\n',
    }


def report(text: str, rounds: int, scratch: Path) -> list[SystemPrivacy]:
    """The guarantees of the server ``text`` configures, a user taking part in ``rounds``
    rounds."""
    path = scratch / "server.toml"
    path.write_text(text)
    return report_config(load_config(path), rounds)


def _figure(value: dict[str, Any] | str) -> str:
    if isinstance(value, str):
        return value
    eps, delta = value.get("epsilon"), value.get("delta")
    kind = "pure" if not delta else f"delta {delta:g}"
    return f"epsilon {eps:.4g} ({kind})"


def main() -> None:
    """Parse the arguments, print each deployment's guarantee (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds a user takes part in")
    parser.add_argument("--epsilon", type=float, default=3.0, help="central DP budget")
    parser.add_argument("--delta", type=float, default=1e-6, help="central DP delta")
    parser.add_argument("--p", type=float, default=0.9, help="FOLtR-ES randomized response p")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, text in deployments(args.rounds, args.epsilon, args.delta, args.p).items():
            found = report(text, args.rounds, Path(scratch))
            rows[name] = [r.to_json() for r in found]
            for row in found:
                print(f"{name}: {row.mechanism}")
                print(f"  per message:          {_figure(row.per_message)}")
                print(f"  per user, {args.rounds:3d} rounds: {_figure(row.per_user)}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
