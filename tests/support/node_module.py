"""Calls an export of one of the page's JavaScript modules in Node (tests/support/module_harness.mjs),
as the page calls it: int16 arrays go in as Int16Array, typed arrays come back as lists."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HAS_NODE = bool(shutil.which("node"))


def call(module: str, name: str, *args):
    """module: a path under static/ (e.g. "workbench/matched.js"); numpy int16 arrays travel as Int16Array."""
    def wire(a):
        return {"int16": a.astype(int).tolist()} if isinstance(a, np.ndarray) else a
    out = subprocess.run(["node", str(ROOT / "tests/support/module_harness.mjs"), str(ROOT / "static" / module), name],
                         input=json.dumps([wire(a) for a in args]), capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)
