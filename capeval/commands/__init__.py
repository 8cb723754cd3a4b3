"""The subcommands of the ``capeval`` command, one module each (``score``, ``benchmark``, ``regions``, ``train``):
each adds its parser with ``register(subparsers)`` and sets its handler as the parser's ``handler`` default.

Model code is imported by the handlers when they run, so that building the parser (``capeval --help``) imports no
torch.
"""
