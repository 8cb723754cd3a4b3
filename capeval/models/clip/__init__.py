"""CLIP (OpenAI and OpenCLIP checkpoints converted to transformers' ``CLIPModel``): the reference preprocessing
(``preprocessing``), pooled tower forwards (``modeling``), loading (``loading``) and the engine's row producers
(``encoders``)."""
