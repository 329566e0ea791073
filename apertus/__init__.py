"""apertus: a declarative pipeline from raw web text to a released LLM (the Apertus recipe)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("apertus")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
