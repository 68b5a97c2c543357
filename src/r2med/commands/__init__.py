"""Subcommands of the ``r2med`` command line, one module each, each with ``register(subparsers, common_parent)``."""
