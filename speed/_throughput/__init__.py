"""The parts of ``throughput.py``: its workloads, the peers it times, the table of peers and the report.

``_paths`` is imported first, so that every part imports this checkout's ``capeval``.
"""
import _paths  # noqa: F401
