"""Where expansion files are: the official file name, and the one folder r2med writes generated ones to.

The official layout puts an LLM's expansions of a dataset at ``<dataset dir>/<method>/<llm>/query_with_hydoc.jsonl``
(rows ``{"id", "text", "hy_doc", ...}``). ``r2med expand`` and ``r2med agent`` write theirs in the same format at
``<R2MED_HOME>/expansions/<Dataset>/<method>/<llm>/`` (:func:`expansion_dir`), where ``r2med run --expansion
<method>/<llm>`` and the HTML report find them. ``<llm>`` is a folder name: a model id becomes one with
:func:`llm_dir_name` first (``Qwen/Qwen2.5-7B`` -> ``Qwen_Qwen2.5-7B``); an agent that searched with anything but
the default BM25 adds its searcher (``<llm>@<searcher>``, :func:`agent_folder_name`).
"""

from __future__ import annotations

import re
from pathlib import Path

from r2med.errors import UsageError
from r2med.io.names import check_name
from r2med.settings import Settings

#: the official expansion file's name
EXPANSION_FILE = "query_with_hydoc.jsonl"

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def llm_dir_name(name: str) -> str:
    """A filesystem-safe directory name for an LLM name or model id.

    >>> llm_dir_name("qwen-7b"), llm_dir_name("Qwen/Qwen2.5-7B-Instruct"), llm_dir_name("/models/my model/")
    ('qwen-7b', 'Qwen_Qwen2.5-7B-Instruct', 'models_my_model')
    """
    safe = _UNSAFE.sub("_", name.strip()).strip("._-+")
    if not safe:
        raise UsageError(f"LLM name {name!r} has no usable characters for a directory name; pass --llm-name")
    return check_name(safe, what=f"the folder name of LLM {name[:60]!r}", fix="pass a shorter --llm-name")


#: the searcher of an agent whose expansion folder is the LLM's name alone (``r2med agent``'s default, ``--search-with
#: bm25``: the folders r2med has always written)
DEFAULT_SEARCHER = "bm25"


def agent_folder_name(llm: str, searcher: str) -> str:
    """The expansion folder name of an agent that ran LLM folder ``llm`` (:func:`llm_dir_name`'s) and searched with
    ``searcher`` (its system name: the retriever's, or a retrieval server's ``server-HOST_PORT_PATH``): ``llm`` for
    the default BM25, else ``<llm>@<searcher>``. One folder per searcher: two agents of one LLM name that search
    differently never replace each other's files (``@`` is never in an LLM folder name, so no two pairs meet).

    >>> agent_folder_name("qwen", "bm25"), agent_folder_name("qwen", "server-10.0.0.5_8000_retrieve")
    ('qwen', 'qwen@server-10.0.0.5_8000_retrieve')
    """
    if searcher == DEFAULT_SEARCHER:
        return llm
    return check_name(f"{llm}@{searcher}", what=f"the expansion folder of LLM {llm[:60]!r} searching with "
                      f"{searcher[:60]!r}", fix="pass a shorter --llm-name")


def expansions_root(settings: Settings, dataset: str) -> Path:
    """The folder of every generated expansion set of ``dataset``: ``<R2MED_HOME>/expansions/<dataset>``."""
    return settings.home / "expansions" / check_name(dataset, what="the dataset name")


def expansion_dir(settings: Settings, dataset: str, method: str, llm: str) -> Path:
    """The folder of ``method``/``llm``'s generated expansions of ``dataset``; ``llm`` is a folder name, used as
    given (UsageError when it cannot be one; make a model id one with :func:`llm_dir_name`).

    >>> from r2med.settings import get_settings
    >>> expansion_dir(get_settings({"R2MED_HOME": "/h"}), "Biology", "hyde", "Qwen_Qwen2.5-7B").as_posix()
    '/h/expansions/Biology/hyde/Qwen_Qwen2.5-7B'
    """
    for role, name in (("GAR method", method), ("LLM", llm)):
        check_name(name, what=f"the {role} name")
    return expansions_root(settings, dataset) / method / llm
