"""Where capeval's warnings point: at the user's line that called into capeval, not at capeval's own lines, however
deep in capeval the warning is raised (a scorer's ``score`` reached through another scorer, the engine, a producer)."""
from __future__ import annotations

import os
import sys

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by the caller of this function that names the first frame
    outside the capeval package (the outermost capeval frame when the whole stack is capeval's, as under the
    command line)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level
