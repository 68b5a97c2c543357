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

__all__ = ["Dataset", "Qrels", "R2MedError", "Run", "Scores", "__version__", "evaluate", "load_dataset", "load_datasets"]
