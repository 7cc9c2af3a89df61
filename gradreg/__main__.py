"""``python -m gradreg`` is the ``gradreg`` command."""
from gradreg.cli import entry

entry()
