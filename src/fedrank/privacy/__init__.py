"""What protects a user's data (docs/privacy.md): the privatizers a device applies before a
message leaves it (sign compression, randomized response, randomized signs, Laplace noise),
the central and distributed noise mechanisms, their accounting, and the KL disclosure
measure of FedPS. :mod:`fedrank.federation.privacy` assembles them into a private
strategy."""

from fedrank.privacy.sign import SignCompressor

__all__ = ["SignCompressor"]
