"""The parts of ``report.py``: the figure file of the originals, each family's measurements, and the table and target
lines.

``_paths`` is imported first, so that every part imports this checkout's ``capeval``.
"""
import _paths  # noqa: F401
