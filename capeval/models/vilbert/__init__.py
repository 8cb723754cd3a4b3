"""ViLBERT (vilbert-multi-task) trunk for ViLBERTScore: configuration, modeling, text and region inputs, loading."""
from capeval.models.vilbert.configuration import VilbertConfig
from capeval.models.vilbert.loading import LoadedVilbert, load_vilbert, load_vilbert_folder
from capeval.models.vilbert.modeling import VilbertModel
from capeval.models.vilbert.preprocessing import region_inputs
from capeval.models.vilbert.tokenization import VilbertTokenizer

__all__ = ["LoadedVilbert", "VilbertConfig", "VilbertModel", "VilbertTokenizer", "load_vilbert", "load_vilbert_folder",
           "region_inputs"]
