"""Schemathesis against the server's own OpenAPI document (``/openapi.json``): requests
generated from the documented schemas of every operation (and deliberately broken ones)
never get a 5xx, get only documented status codes and content types, answers match their
documented schemas, and a refused request changes nothing. Generation is derandomized.

Two of Schemathesis's checks are left out on purpose: the server is more lenient than its
schema in a few places (``"metrics": null`` is read as no metrics; a batch answers 200 with
per-message results even when a message breaks the schema), which is by design.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from fedrank.server.openapi import openapi_document
from tests.server.serverkit import ADMIN_TOKEN, Live, live_server, row_count, state_of

schemathesis = pytest.importorskip("schemathesis")
from schemathesis import checks  # noqa: E402 (only once schemathesis is known to be there)

TOML = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
max_body_bytes = 4096
"""

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]
EXCLUDED = [checks.negative_data_rejection, checks.positive_data_acceptance]


@pytest.fixture(scope="module")
def st_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(
        tmp_path_factory.mktemp("schemathesis"),
        TOML,
        iteration_seconds=0,
        iteration_min_updates=10**9,
    ) as live:
        yield live


SCHEMA = schemathesis.openapi.from_dict(openapi_document())
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


def _has_inputs(op: Any) -> bool:
    return any(len(part) for part in (op.path_parameters, op.query, op.headers, op.body))


# Negative cases need something to break: operations without inputs have positive ones only.
CASES = [
    pytest.param(op, mode, id=f"{op.label}-{mode.value}")
    for op in OPERATIONS
    for mode in schemathesis.GenerationMode
    if mode is schemathesis.GenerationMode.POSITIVE or _has_inputs(op)
]


@pytest.mark.parametrize(("operation", "mode"), CASES)
def test_generated_requests_follow_the_contract(operation: Any, mode: Any, st_server: Live) -> None:
    """Schemathesis's generator through Hypothesis directly (not its pytest plugin, which
    depends on pytest internals): valid requests for ``positive``, schema-breaking ones for
    ``negative``; each checked against the document the server serves."""
    served = st_server.client.get("/openapi.json").json()
    assert served == openapi_document()  # what is tested is what clients read

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        before, rows = state_of(st_server.client), row_count(st_server.store)
        response = case.call_and_validate(
            base_url=st_server.process.url, checks=CHECKS, excluded_checks=EXCLUDED
        )
        if response.status_code >= 400:
            assert state_of(st_server.client) == before
            assert row_count(st_server.store) == rows

    run()
