"""``Agent``: an agentic search loop (Search-R1 or Search-o1) on each dataset, as a stage.

Per dataset the agent searches the dataset's own corpus (or a ``knowledge`` corpus) with ``retriever`` and
writes its official expansion file, trajectories and response cache under
``$R2MED_HOME/expansions/<Dataset>/<style>/<llm>/`` (so ``r2med run --expansion <style>/<llm>`` searches with its
answers); an agent that searches with anything but the default BM25 (another retriever, a retrieval server)
writes to ``<llm>@<retriever>/`` instead (``agent_folder_name``), so agents of one LLM name that search
differently never replace each other's files. The stage's run is the agent's own ranking (every document its
searches returned, RRF over its searches), stored under ``agent/<style>/<llm>/<retriever>/`` with the trajectories
beside it (``<Dataset>.trajectories.jsonl``). A judged query the agent never searched for counts as 0 (``judged_all``).

The expansion folder is locked (``<folder>/.r2med.lock``) before anything in it is read or written: a second agent
with the same LLM name, searcher and ``R2MED_HOME`` (whatever its ``--output``) is refused (exit 6) and changes
nothing. The manifest of the stage's result records the digests of the folder's expansion file and trajectories: a
stored result is reused only while they are what this run wrote (``stored_problem``), else it is made again (from the
response cache: no answer is requested twice).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from r2med.agent.config import AgentConfig
from r2med.agent.outputs import TRAJECTORIES_FILE, AgentReport
from r2med.datasets.model import Dataset
from r2med.errors import IncompleteResultError
from r2med.io.atomic import recorded_writes
from r2med.io.digest import Digest, digest_file
from r2med.io.lock import DirectoryLock
from r2med.retrievers.base import Retriever
from r2med.settings import Settings, get_settings
from r2med.stages.base import component_key
from r2med.store.expansions import EXPANSION_FILE, agent_folder_name, expansion_dir, llm_dir_name
from r2med.store.results import SystemPath
from r2med.types import Run

if TYPE_CHECKING:
    from r2med.agent.context import ContextWindow

#: the files of the expansion folder a stored result depends on (``r2med run --expansion`` reads the first)
FOLDER_FILES = (EXPANSION_FILE, TRAJECTORIES_FILE)
FOLDER_FIX = "make it writable, or set R2MED_HOME to a writable directory"
BUSY_FIX = ("wait for it to finish (both would write the same files: this run changed nothing), or give this agent "
            "its own folder with --llm-name")


class Agent:
    """Run ``config``'s agent over each dataset, searching with ``retriever`` (``knowledge``: a corpus to search
    instead of the dataset's own). ``client``: an injected chat client (tests); ``top_k``: the ranking's depth."""

    judged_all = True

    def __init__(self, config: AgentConfig, retriever: Retriever, *, knowledge: Dataset | None = None,
                 settings: Settings | None = None, top_k: int = 100, client: Any = None, progress: bool = True,
                 search_key: dict[str, Any] | None = None) -> None:
        self.agent_config = config.resolved()
        self.template_given = config.chat_template is not None  # else the model's own or its name's (said at start)
        self.search_key = search_key  # the search retriever's declared options (RetrieverSpec.key())
        self.retriever = retriever
        self.knowledge = knowledge
        self.settings = settings or get_settings()
        self.top_k = top_k
        self.client = client
        self.progress = progress
        # a run over a knowledge corpus is another agent: its own folders unless the user named the LLM
        named = self.agent_config.name
        if knowledge is not None and self.agent_config.llm_name is None:
            named = f"{named}-{knowledge.name}"
        self.llm = llm_dir_name(named)
        self.where = SystemPath.agent(self.agent_config.style, self.llm, retriever.name)
        self.ignore_identical_ids = retriever.ignore_identical_ids
        self._reports: dict[str, AgentReport] = {}
        self._written: dict[str, dict[str, Digest]] = {}
        self._knowledge_searcher: Any = None
        self._window: ContextWindow | None | bool = False  # False: not learned yet

    def context(self) -> ContextWindow | None:
        """The context of one request (``--context-length``, else the server's; None: unknown), learned once: it
        keys the result (it clamps ``max_tokens`` and ends queries ``context-full``) and the run uses that figure."""
        if self._window is False:
            from r2med.agent.context import context_window  # only when an agent runs

            c = self.agent_config
            self._window = context_window(str(c.base_url), str(c.llm_model), given=c.context_length,
                                          secret=None if c.context_length else c.secret(), timeout=c.timeout)
        assert self._window is not True
        return self._window

    def out_dir(self, dataset: Dataset) -> Path:
        """Where the agent's files for ``dataset`` go (the expansion folder ``r2med run --expansion`` reads)."""
        return expansion_dir(self.settings, dataset.name, self.agent_config.style,
                             agent_folder_name(self.llm, self.retriever.name))

    def _corpus(self, dataset: Dataset) -> tuple[Dataset, str]:
        if self.knowledge is not None:
            return self.knowledge, self.knowledge.source
        return dataset, "dataset"

    @property
    def remote(self) -> bool:
        """Whether the agent searches a retrieval server (``--search-with URL``: ``r2med.agent.remote``)."""
        return bool(getattr(self.retriever, "batched", False))

    def config(self, dataset: Dataset) -> dict[str, Any]:
        if self.remote:  # the server's URL and what it says it searches: another server, another result
            search: dict[str, Any] = self.retriever.describe()
        else:
            corpus, source = self._corpus(dataset)
            search = {"retriever": component_key(self.retriever, self.search_key, corpus.name),
                      "corpus": corpus.name, "source": source, "sha256": dict(corpus.sha256)}
        return {
            "agent": self.agent_config.key(), "search": search, "top_k": self.top_k, "judged_all": True,
            # the tokens per request the run had: a stored result made under another context is not this one's
            "context_length": None if (window := self.context()) is None else window.length,
        }

    def run(self, dataset: Dataset) -> Run:
        folder = self.out_dir(dataset)
        with DirectoryLock(folder, what="the agent's expansion folder", fix=FOLDER_FIX, busy_fix=BUSY_FIX) as lock:
            lock.acquire()  # before the folder is read or written, before the first request
            with recorded_writes() as written:
                run = self._run(dataset, folder)
        self._written[dataset.name] = {path.name: digest for path, digest in written.items()
                                       if path.parent == folder and path.name in FOLDER_FILES}
        return run

    def _run(self, dataset: Dataset, folder: Path) -> Run:
        from r2med.agent.search import open_searcher

        corpus, source = self._corpus(dataset)
        if self.remote:  # a retrieval server: its own corpus
            searcher = self.retriever
        elif self.knowledge is None:  # the dataset's own corpus: opened for this dataset only
            searcher = open_searcher(self.retriever, corpus, source=source)
        else:  # one knowledge corpus for every dataset: opened once
            self._knowledge_searcher = self._knowledge_searcher or open_searcher(self.retriever, corpus, source=source)
            searcher = self._knowledge_searcher
        from r2med.agent.loop import run_agent  # asyncio and the agent's loop: only when an agent runs

        report = run_agent(dataset, self.agent_config, searcher, out_dir=folder, client=self.client,
                           template_given=self.template_given, window=self.context(),
                           top_k=self.top_k, progress=self.progress)
        self._reports[dataset.name] = report
        if report.failures:
            first = next(iter(report.failures.items()))
            raise IncompleteResultError(
                f"{len(report.failures)} of {report.queries} queries failed (first: {first[0]!r}: {first[1]}); the "
                f"finished ones are in {report.paths['expansions']} and {report.paths['cache']}")
        assert report.run is not None
        return report.run

    def details(self, dataset: Dataset) -> dict[str, Any]:
        report = self._reports.get(dataset.name)
        if report is None:
            return {}
        files = {name: digest.to_json() for name, digest in sorted(self._written.get(dataset.name, {}).items())}
        return {"agent": {k: v for k, v in report.as_dict().items() if k != "failures"}, "expansion_folder": files}

    def stored_problem(self, dataset: Dataset, details: dict[str, Any]) -> str | None:
        """Why a stored result of this agent must not be reused: a file of its expansion folder is missing or is not
        what the run that stored the result wrote (another process, an edit); ``None`` when every one is."""
        folder = self.out_dir(dataset)
        recorded = details.get("expansion_folder")
        if not isinstance(recorded, dict) or not recorded:
            return f"its manifest records no digest of the files in {folder}"
        for name, value in sorted(recorded.items()):
            path = folder / name
            try:
                expected = Digest.from_json(value)
            except ValueError:
                return f"its manifest's digest of {path} is damaged"
            if not path.is_file():
                return f"{path} is missing"
            if digest_file(path) != expected:
                return f"{path} is not the file this result was made with (changed since)"
        return None

    def artifacts(self, dataset: Dataset) -> dict[str, list[dict[str, Any]]]:
        report = self._reports.get(dataset.name)
        return {"trajectories": report.trajectories} if report is not None else {}
