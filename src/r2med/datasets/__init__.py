"""The R2MED datasets: catalog, hub download, local directories, validation, statistics."""

from r2med.datasets.catalog import DatasetSpec, dataset_names, get_spec, resolve_names
from r2med.datasets.loading import dataset_loaders, load_dataset, load_datasets, local_dataset_dirs, locate
from r2med.datasets.local import load_dir, scan_dir
from r2med.datasets.model import Dataset

__all__ = [
    "Dataset", "DatasetSpec", "dataset_loaders", "dataset_names", "get_spec", "load_dataset", "load_datasets",
    "load_dir", "local_dataset_dirs", "locate", "resolve_names", "scan_dir",
]
