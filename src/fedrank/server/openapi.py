"""The OpenAPI 3.1 description of the server's API, served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from fedrank.server.envelope import json_response

_ID = {"type": "string", "pattern": "^[A-Za-z0-9._:\\-]{1,128}$"}
_ERROR = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
}
_MESSAGE = {
    "type": "object",
    "required": ["message_id", "model_version"],
    "additionalProperties": False,
    "properties": {
        "message_id": {**_ID, "description": "client-made UUID: the idempotency key"},
        "model_version": {"type": "integer", "minimum": 0, "maximum": 999999999999},
        "enrollment_id": {**_ID, "description": "the client's own random enrollment id"},
        "client_id": {**_ID, "description": "the id used at check-in (rounds only)"},
        "payload": {
            "type": "object",
            "description": "workload-specific: frecency {gradient: [floats], n} or {signs: "
            "base64}; foltr-es {seed, metric, antithetic_metric}; fedavg {delta: [floats], n}; "
            "{} for a metrics-only ping",
        },
        "metrics": {
            "type": ["object", "null"],
            "maxProperties": 32,
            "additionalProperties": {"type": "number"},
            "description": "names and ranges from the server's [metrics] schema; anything "
            "else is refused with 422 unknown_metric or metric_range",
        },
    },
}


#: The signature of an enrolled device's request (docs/devices.md).
_DEVICE = {
    "name": "X-Fedrank-Device",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "maxLength": 160},
    "description": "'<device id> <session expiry> <timestamp ms> <HMAC>' of an enrolled "
    "device (required where [identity] requires enrolled devices; docs/devices.md)",
}
_B64 = {"type": "string", "description": "URL-safe base64"}


def _json_response(description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    content = {"application/json": {"schema": schema or {"type": "object"}}}
    return {"description": description, "content": content}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _json_response("refused, with the reason", _ERROR) for c in codes}


def openapi_document() -> dict[str, Any]:
    """The API description (the endpoints: :mod:`fedrank.server.routes`)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "fedrank federation server", "version": "1"},
        "paths": {
            "/v1/model": {
                "get": {
                    "summary": "The model this client is served (its study branch)",
                    "parameters": [
                        {"name": "enrollment_id", "in": "query", "schema": _ID},
                        {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": _json_response("the model, with an ETag"),
                        "304": {"description": "not modified"},
                        **_errors(422),
                    },
                }
            },
            "/v1/model/{version}": {
                "get": {
                    "summary": "A published model version",
                    "parameters": [
                        {
                            "name": "version",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer", "minimum": 0, "maximum": 999999999999},
                        }
                    ],
                    "responses": {"200": _json_response("the version"), **_errors(404, 422)},
                }
            },
            "/v1/updates": {
                "post": {
                    "summary": "Send one update (idempotent by message_id)",
                    "parameters": [_DEVICE],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": _MESSAGE},
                            "application/vnd.fedrank.update": {
                                "schema": {"type": "string", "format": "binary"},
                                "description": "ES message (8/12 bytes) or frecency sign bits; "
                                "ids in X-Message-Id, X-Model-Version, X-Enrollment-Id, "
                                "X-Client-Id",
                            },
                        },
                    },
                    "responses": {
                        "202": _json_response("accepted and durably stored"),
                        "200": _json_response("duplicate message_id: already counted"),
                        **_errors(400, 401, 403, 408, 409, 413, 415, 422, 429, 503),
                    },
                }
            },
            "/v1/updates:batch": {
                "post": {
                    "summary": (
                        "Many messages, one columnar batch (MessageBatch), or a proxy's "
                        "merged aggregator state"
                    ),
                    "parameters": [_DEVICE],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "oneOf": [
                                        {
                                            "type": "object",
                                            "required": ["messages"],
                                            "properties": {
                                                "messages": {
                                                    "type": "array",
                                                    "minItems": 1,
                                                    "maxItems": 10000,
                                                    "items": _MESSAGE,
                                                }
                                            },
                                        },
                                        {
                                            "type": "object",
                                            "required": ["batch", "message_ids", "model_version"],
                                            "properties": {
                                                "batch": {
                                                    "type": "object",
                                                    "required": ["size"],
                                                    "properties": {
                                                        "size": {"type": "integer", "minimum": 1},
                                                        "dim": {"type": "integer", "minimum": 1},
                                                        "vector": {"type": "array"},
                                                        "weight": {"type": "array"},
                                                        "seed": {"type": "array"},
                                                        "metric": {"type": "array"},
                                                        "antithetic": {"type": "array"},
                                                    },
                                                },
                                                "message_ids": {
                                                    "type": "array",
                                                    "minItems": 1,
                                                    "maxItems": 10000,
                                                    "items": {"type": "string"},
                                                },
                                                "model_version": {"type": "integer", "minimum": 0},
                                            },
                                        },
                                        {
                                            "type": "object",
                                            "description": "a proxy's merged state; needs "
                                            "Authorization: Bearer <its [[proxies]] token>; "
                                            "under [rounds] also clients: its contributors",
                                            "required": [
                                                "aggregate",
                                                "count",
                                                "batch_id",
                                                "model_version",
                                            ],
                                        },
                                    ]
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json_response("per-message results"),
                        "202": _json_response("aggregate accepted"),
                        **_errors(400, 401, 403, 408, 409, 413, 422, 429, 503),
                    },
                }
            },
            "/v1/checkin": {
                "post": {
                    "summary": "Ask to be selected for the current round",
                    "parameters": [_DEVICE],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "description": "an enrolled device may send {} (it is "
                                    "its own client_id)",
                                    "properties": {"client_id": _ID},
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json_response(
                            "waiting (poll again at poll_at), selected (with deadline) or not"
                        ),
                        **_errors(400, 401, 403, 404, 422, 429),
                    },
                }
            },
            "/v1/secagg": {
                "post": {
                    "summary": (
                        "A selected client's message of the open secure-aggregation stage, "
                        "or a proxy's sum of its clients' masked inputs (stage masked_sum, "
                        "with the proxy's bearer token)"
                    ),
                    "parameters": [_DEVICE],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "oneOf": [
                                        {
                                            "type": "object",
                                            "required": [
                                                "client_id",
                                                "session",
                                                "stage",
                                                "message",
                                            ],
                                            "properties": {
                                                "client_id": _ID,
                                                "session": {"type": "string"},
                                                "stage": {
                                                    "enum": [
                                                        "advertise",
                                                        "share_keys",
                                                        "check_shares",
                                                        "masked_input",
                                                        "unmasking",
                                                    ]
                                                },
                                                "message": {"type": "object"},
                                            },
                                        },
                                        {
                                            "type": "object",
                                            "required": ["session", "stage", "message"],
                                            "properties": {
                                                "session": {"type": "string"},
                                                "stage": {"enum": ["masked_sum"]},
                                                "message": {
                                                    "type": "object",
                                                    "required": [
                                                        "senders",
                                                        "masked",
                                                        "digests",
                                                        "signatures",
                                                    ],
                                                    "properties": {
                                                        "senders": {
                                                            "type": "array",
                                                            "items": {"type": "integer"},
                                                        },
                                                        "masked": {"type": "string"},
                                                        "digests": {
                                                            "type": "array",
                                                            "items": {"type": "string"},
                                                        },
                                                        "signatures": {
                                                            "type": "array",
                                                            "items": {"type": "string"},
                                                        },
                                                    },
                                                },
                                            },
                                        },
                                    ]
                                }
                            }
                        },
                    },
                    "responses": {
                        "202": _json_response("accepted"),
                        **_errors(400, 401, 403, 404, 409, 413, 422, 429),
                    },
                },
                "get": {
                    "summary": "The session's stage and this client's input for it",
                    "parameters": [
                        {"name": "client_id", "in": "query", "schema": _ID},
                        {"name": "session", "in": "query", "schema": {"type": "string"}},
                        _DEVICE,
                    ],
                    "responses": {
                        "200": _json_response("stage, deadline, input"),
                        **_errors(401, 403, 404, 409, 429),
                    },
                },
            },
            "/v1/status": {
                "get": {
                    "responses": {
                        "200": _json_response(
                            "server status; privacy: each user's guarantee so far; under "
                            "[privacy] the counts are null without the admin token "
                            "(counts_withheld)"
                        )
                    }
                }
            },
            "/v1/summary": {
                "get": {
                    "responses": {
                        "200": _json_response("per-branch, per-iteration metrics"),
                        **_errors(403),
                    }
                }
            },
            "/metrics": {
                "get": {"responses": {"200": {"description": "Prometheus text"}, **_errors(403)}}
            },
            "/v1/dashboard": {
                "get": {
                    "responses": {
                        "200": _json_response(
                            "what the dashboard page shows: the /v1/status body, model "
                            "versions, closed iterations, refusals, round, privacy spends, "
                            "clipping, alerts; under [privacy] the counts need the admin token"
                        )
                    }
                }
            },
            "/dashboard": {
                "get": {
                    "responses": {
                        "200": {
                            "description": "the operator dashboard (HTML)",
                            "content": {"text/html": {"schema": {"type": "string"}}},
                        }
                    }
                }
            },
            "/v1/devices/enroll": {
                "post": {
                    "summary": "Enroll a device's Ed25519 key with an operator's token (or "
                    "evidence for [identity] attestation): its device id",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["public_key"],
                                    "properties": {
                                        "token": {"type": "string", "maxLength": 256},
                                        "public_key": {**_B64, "description": "32 raw bytes"},
                                        "evidence": {},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": _json_response("enrolled: {device_id}"),
                        **_errors(400, 401, 408, 413, 422, 429),
                    },
                }
            },
            "/v1/devices/session": {
                "post": {
                    "summary": "A session key for an Ed25519 signature of the device's key over "
                    "'fedrank-session\\n<device_id>\\n<timestamp>\\n<nonce>'",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["device_id", "timestamp", "nonce", "signature"],
                                    "properties": {
                                        "device_id": {"type": "string"},
                                        "timestamp": {"type": "integer"},
                                        "nonce": {"type": "string"},
                                        "signature": {**_B64, "description": "64 raw bytes"},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json_response("{device_id, session_key, expires}"),
                        **_errors(400, 401, 408, 413, 422, 429),
                    },
                }
            },
            "/v1/admin/devices": {
                "post": {
                    "summary": "Issue single-use enrollment tokens (bearer token)",
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "count": {"type": "integer"},
                                        "label": {"type": "string"},
                                        "expires_hours": {"type": "number"},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": _json_response("{tokens}"),
                        **_errors(400, 401, 403, 408, 413, 422),
                    },
                }
            },
            "/v1/admin/{action}": {
                "post": {
                    "summary": "close, pause or resume (bearer token)",
                    "parameters": [
                        {
                            "name": "action",
                            "in": "path",
                            "required": True,
                            "schema": {"enum": ["close", "pause", "resume"]},
                        }
                    ],
                    "responses": {
                        "200": _json_response("done"),
                        **_errors(401, 403, 404, 409),
                    },
                }
            },
        },
    }


async def openapi(request: Request) -> Response:
    """``GET /openapi.json``."""
    return json_response(openapi_document())
