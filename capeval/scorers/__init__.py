"""Stateful scorers: :mod:`capeval.scorers.base` holds the :class:`~capeval.scorers.base.Scorer` base class, one
module per metric family the concrete scorer. Scorers are found by family name through :mod:`capeval.registry`."""
