"""Integrations of capeval's metrics with training libraries (``capeval.integrations.trainer``: transformers' Trainer)."""
