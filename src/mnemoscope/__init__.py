"""mnemoscope: context and memory for LLM agents."""

from mnemoscope._version import __version__

__all__ = ["__version__"]
