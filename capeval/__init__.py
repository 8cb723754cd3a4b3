"""capeval: faithful, fast image-caption evaluation metrics for the Hugging Face ecosystem."""
from capeval.backbones import ModelNotAvailableError
from capeval.inputs import InputError
from capeval.scorers import CLIPScore, PACScore
from capeval.version import __version__

__all__ = ["CLIPScore", "PACScore", "InputError", "ModelNotAvailableError", "__version__"]
