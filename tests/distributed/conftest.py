"""The distributed tests train the small task of the training tests (tests/translation)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "translation"))
