"""The small real collection r2med ships for a first offline run (``r2med datasets sample DIR``).

``scifact-sample``: 50 SciFact claims, 574 abstracts, 60 judgements that all resolve, in R2MED's layout,
licence CC BY-NC 2.0 (its ``README.md`` says what it is and how it was built). ``copy_sample`` puts it in
a directory of the user's so that ``r2med run --data-dir DIR`` finds it like any other dataset.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from r2med.errors import InvalidInputError, UsageError
from r2med.io.atomic import write_atomic

#: the dataset's name (its directory under ``DIR``) and its files, README (licence) included
SAMPLE_NAME = "scifact-sample"
SAMPLE_FILES = ("corpus.jsonl", "query.jsonl", "qrels.jsonl", "README.md")
SAMPLE_LICENCE = "CC BY-NC 2.0"


def sample_files() -> dict[str, bytes]:
    """The shipped files of the sample, name -> bytes (read from the installed package)."""
    folder = resources.files("r2med").joinpath("data", "sample", SAMPLE_NAME)
    return {name: folder.joinpath(name).read_bytes() for name in SAMPLE_FILES}


def copy_sample(dest: Path) -> Path:
    """Copy the sample to ``dest/scifact-sample`` and return that directory.

    Copying again is harmless (files already identical are left alone). A file there with other contents is
    never overwritten: that is invalid input (exit 5) naming the file, since it may be the user's own data.
    """
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest}: not a directory; give a directory to copy the sample into")
    target = dest / SAMPLE_NAME
    files = sample_files()
    for name, data in files.items():
        path = target / name
        if path.exists() and (not path.is_file() or path.read_bytes() != data):
            raise InvalidInputError(
                f"{path}: already exists and is not r2med's {SAMPLE_NAME} file; it was left untouched. "
                "Copy the sample into another directory (r2med datasets sample OTHER_DIR)"
            )
    for name, data in files.items():
        path = target / name
        if not path.exists():
            write_atomic(path, lambda handle, data=data: handle.write(data), binary=True)
    return target
