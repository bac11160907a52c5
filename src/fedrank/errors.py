"""Exception types raised by fedrank. Each message says what is wrong and how to fix it."""


class FedrankError(Exception):
    """Base class of every error fedrank raises on purpose."""


class ConfigError(FedrankError, ValueError):
    """A parameter or configuration value is invalid."""


class DataFormatError(FedrankError, ValueError):
    """An input file or array does not have the expected format."""


class SchemaError(DataFormatError):
    """A database lacks a table or column fedrank needs."""


class CodecError(FedrankError, ValueError):
    """A message could not be encoded or decoded."""
