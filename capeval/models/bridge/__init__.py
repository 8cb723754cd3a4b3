"""BRIDGE (Sarto et al., ECCV 2024): configuration, template captions (``templates``), mapping network and
pseudo-captions (``modeling``), training losses (``losses``), loading and saving (``loading``), engine rows
(``encoders``) and the training recipe (``training``)."""
