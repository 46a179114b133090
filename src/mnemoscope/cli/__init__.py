"""The ``mnemoscope`` command-line interface."""

from mnemoscope.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
