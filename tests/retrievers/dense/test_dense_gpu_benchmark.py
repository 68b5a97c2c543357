"""benchmarks/dense_gpu.py --tiny runs on a CPU (as CI runs it) with only torch, transformers and
sentence-transformers and what they bring along: r2med's other dependencies are blocked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sentence_transformers")

REPO = Path(__file__).resolve().parents[3]
BLOCKED = ("pytrec_eval", "msgspec", "tomli")  # scipy comes with sentence-transformers, httpx2 with huggingface_hub
RUN = f"""
import runpy, sys
for name in {BLOCKED!r}:  # as if not installed: import fails, importlib.util.find_spec says None
    sys.modules[name] = None
sys.argv = ["dense_gpu.py", "--tiny", "--workdir", sys.argv[1]]
runpy.run_path({str(REPO / "benchmarks" / "dense_gpu.py")!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_the_gpu_benchmark_runs_tiny_on_a_cpu(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for shape in ("qwen3-8b", "bge-large"):
        assert f"{shape}: recipe" in out
    assert out.count("r2med default") == 2 and out.count("plain sorted loop") == 2
    assert out.count("SentenceTransformer.encode") == 2
    cosines = [float(c) for c in re.findall(r"worst per-text cosine ([0-9.]+)", out)]
    assert len(cosines) == 4 and min(cosines) >= 0.999999  # float32 on a CPU: the same vectors
