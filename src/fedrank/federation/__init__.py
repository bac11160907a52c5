"""The federation layer: the one round loop (:mod:`.round`), the registry of systems
(:mod:`.registry`) and the privacy factory every runner and the server use
(:mod:`.privacy`). See docs/architecture.md."""
