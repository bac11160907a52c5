"""``python -m fedrank.cli``: the same as the ``fedrank`` command."""

from fedrank.cli import main

main()
