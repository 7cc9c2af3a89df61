"""SciPy is imported when a kernel first needs it (gradreg_plugins._lazy), not when the plugins
load: every command would otherwise pay 0.2-0.3 s for it."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import gradreg as gr
    from gradreg.registry import get_registry

    get_registry()                      # every plugin loaded
    loaded = sorted(m for m in ("scipy.special", "scipy.linalg", "scipy.sparse") if m in sys.modules)
    graph = gr.Graph()
    with graph.as_default():
        x = gr.placeholder(gr.float64, [3], name="x")
        y = gr.apply_op("Erfinv", x)
        k = gr.apply_op("BesselK0", x)              # stored at import time as a lazy function
        m = gr.placeholder(gr.float64, [2, 2], name="m")
        r = gr.apply_op("MatrixSquareRoot", m)
    values = gr.Session(graph, backend="numpy").run([y, k, r], {x: [-0.5, 0.0, 0.9], m: [[4.0, 0.0], [0.0, 9.0]]})
    after = sorted(m for m in ("scipy.special", "scipy.linalg") if m in sys.modules)
    print(json.dumps({"loaded": loaded, "after": after, "values": [v.tolist() for v in values]}))
""")


def test_scipy_is_imported_when_a_kernel_first_needs_it():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert report["after"] == ["scipy.linalg", "scipy.special"]
    import scipy.special
    erfinv, k0, root = report["values"]
    assert erfinv == scipy.special.erfinv([-0.5, 0.0, 0.9]).tolist()
    assert k0[2] == scipy.special.k0(0.9) and k0[1] == float("inf")
    assert root == [[2.0, 0.0], [0.0, 3.0]]
