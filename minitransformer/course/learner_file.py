"""Loading a learner's exercise file, and saying where in it something went wrong.

Shared by the grading of backwards (grading.py) and of algorithms (tasks/). A file that does
not compile or raises on import is a message, never a traceback: the grader reports it as a
failed check and goes on.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

# What the learner's code may raise, all of them a failed check: sys.exit() too, which would
# otherwise end the command with the exit status of a pass.
LEARNER_ERRORS = (Exception, SystemExit)


def load_module(path: Path, module_name: str) -> ModuleType | str:
    """The learner's file run as the module ``module_name``, or a message saying why it
    could not be (a syntax error with its line, or what importing it raised and where)."""
    loader = importlib.machinery.SourceFileLoader(module_name, str(path))
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # for dataclasses and pickling inside the file
    try:
        loader.exec_module(module)
    except SyntaxError as exc:
        text = f"\n    {exc.text.strip()}" if exc.text else ""
        return f"{path} has a syntax error at line {exc.lineno}: {exc.msg}{text}"
    except LEARNER_ERRORS as exc:
        return f"importing {path} failed{where(exc, path)}: {type(exc).__name__}: {exc}"
    finally:
        sys.modules.pop(module_name, None)
    return module


def where(exc: BaseException, path: Path) -> str:
    """' at line N (`code`)' for the deepest frame of the traceback inside the learner's file."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve() == path.resolve()]
    if not frames:
        return ""
    frame = frames[-1]
    code = (frame.line or "").split("  #")[0].strip()  # without a trailing shape comment
    return f" at line {frame.lineno}" + (f" (`{code}`)" if code else "")
