"""Polos (Wada et al., CVPR 2024): the sentence encoder with its layer mix (``modeling``), the converted folder
(``configuration``, ``loading``) and the engine's sentence-embedding rows (``encoders``); the CLIP side is
:mod:`capeval.models.clip`."""
