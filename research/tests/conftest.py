"""The research scripts are plain files of research/, not a package: put that folder (and
the suite's tests/, for its tiny targets in helpers.py) on the import path so each test
imports the script it checks by name. Run from the clone's
root with the package installed: python -m pytest research/tests (the suite's testpaths
leave this folder out, since the suite tests the package only)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "research"))
