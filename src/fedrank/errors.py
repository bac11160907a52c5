"""Exception types raised by fedrank. Each message says what is wrong and how to fix it."""


class FedrankError(Exception):
    """Base class of every error fedrank raises on purpose."""


class ConfigError(FedrankError, ValueError):
    """A parameter or configuration value is invalid.

    ``field``, ``requirement`` and ``value``, when given, say which field failed, what it
    accepts (``"in 3..100000 (an integer)"``) and the value it was given: the command line
    uses them to name the option the user typed in place of the field.
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        requirement: str | None = None,
        value: object = None,
    ) -> None:
        super().__init__(message)
        self.field, self.requirement, self.value = field, requirement, value


class DataFormatError(FedrankError, ValueError):
    """An input file or array does not have the expected format."""


class SchemaError(DataFormatError):
    """A database lacks a table or column fedrank needs."""


class CodecError(FedrankError, ValueError):
    """A message could not be encoded or decoded."""
