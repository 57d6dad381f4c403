"""The `gpuenergy` command."""

from .main import main

__all__ = ["main"]
