"""SCAN (Lee et al. 2018, kuanghuei/SCAN): the text-image grounding model inside TIGEr, and TIGEr's engine rows
(:mod:`capeval.models.scan.encoders`)."""
from capeval.models.scan.configuration import ScanConfig
from capeval.models.scan.loading import LoadedScan, load_scan
from capeval.models.scan.modeling import ScanModel
from capeval.models.scan.tokenization import ScanTokenizer

__all__ = ["LoadedScan", "ScanConfig", "ScanModel", "ScanTokenizer", "load_scan"]
