"""Where the speed scripts find this checkout and the shared data.

Importing this module puts the repository root first on ``sys.path``, so that the scripts, run as
``python speed/<script>.py`` from anywhere, import this checkout's ``capeval`` and ``conversion`` rather than an
installed copy: import it (or a module that imports it) before either.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

FLICKR8K_DIR = Path(os.environ.get("CAPEVAL_FLICKR8K_DIR", REPO_ROOT.parent / "shared" / "data" / "flickr8k"))
"""The Flickr8k folder: ``$CAPEVAL_FLICKR8K_DIR``, else ``shared/data/flickr8k`` beside the repository."""
EMSCORE_CLIP = REPO_ROOT.parent / "shared" / "data" / "examples" / "emscore" / "Bfyp0C02sko_000248_000258.mp4"
"""The EMScore repository's example clip (10 s, 640 x 360, H.264), which ``video_speed.py`` copies."""
