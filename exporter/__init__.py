"""wattprobe: node power and GPU exporter with energy attributed to pods."""

from importlib.metadata import PackageNotFoundError, version


def _version() -> str:
    """pyproject.toml's version, from the installed distribution's metadata; from pyproject.toml
    itself when this is a checkout that was never installed."""
    try:
        return version("wattprobe")
    except PackageNotFoundError:
        import tomllib  # noqa: PLC0415 (only for an uninstalled checkout)
        from pathlib import Path  # noqa: PLC0415

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__version__ = _version()
