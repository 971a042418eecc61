"""The version of slipstream, in one place: ``slipstream.__version__`` and ``slipstream --version``."""

__version__ = "0.1.0"
