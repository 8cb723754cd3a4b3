"""BRIDGE (Sarto et al., ECCV 2024): configuration, template captions (``templates``), mapping network and
pseudo-captions (``modeling``), training losses (``losses``), loading and saving (``loading``) and engine rows
(``encoders``). The training recipe is :mod:`capeval.training.bridge`."""
