"""fairgate: an OpenAI-compatible gateway with fair-share scheduling."""

__version__ = "0.1.0"
__all__ = ["__version__"]
