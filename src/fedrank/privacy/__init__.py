"""Transformations applied on the device before a message is sent (ARCHITECTURE.md, Sec. 2).

* :class:`SignCompressor`: 1- or 2-bit sign compression (paper Section 5.3).
"""

from fedrank.privacy.sign import SignCompressor

__all__ = ["SignCompressor"]
