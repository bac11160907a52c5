"""The federation service: an HTTP server that publishes models, takes client updates,
stores them durably and steps the model every iteration (see :mod:`fedrank.server.app` and
docs/service.md)."""
