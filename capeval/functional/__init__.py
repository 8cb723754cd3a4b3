"""Functional cores: one module per metric family, each the metric's formulas as plain array maths."""
