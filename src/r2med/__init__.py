"""r2med: run the R2MED benchmark end to end, exactly as published.

Importing this package has no side effects and imports no heavy dependency (no torch, SciPy or
pytrec_eval until a function needs them).

>>> from r2med import Run
>>> Run({"q": {"d": 1.0}}).ranked("q")
[('d', 1.0)]
"""

__version__ = "0.1.0"

from r2med.datasets import Dataset, load_dataset, load_datasets
from r2med.errors import R2MedError
from r2med.evaluation import evaluate
from r2med.types import Qrels, Run, Scores

__all__ = ["Dataset", "Encoder", "Plan", "Qrels", "R2MedError", "Run", "Scores", "__version__", "evaluate", "execute",
           "load_dataset", "load_datasets", "plan", "reproduce", "run", "run_pipeline"]

#: loaded on first use (``r2med.run`` pulls in the pipeline, ``r2med.reproduce`` the published plans; importing
#: ``r2med`` stays light)
_LAZY = {"Encoder": "r2med.retrievers.dense.python_encoder", "reproduce": "r2med.reproduction", "run": "r2med.pipeline",
         "run_pipeline": "r2med.pipeline", "Plan": "r2med.planning", "plan": "r2med.planning",
         "execute": "r2med.execution"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'r2med' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
