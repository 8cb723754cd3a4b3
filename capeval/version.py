"""The capeval version (read by setup.cfg and recorded in every result signature)."""
__version__ = "0.1.0"
