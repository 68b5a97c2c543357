"""The agent loop: Search-R1 or Search-o1 over a corpus, many queries at once, resumable.

For each query the model continues one text (``r2med.agent.styles``): it reasons, closes a search query, the
corpus is searched (``r2med.agent.search``), the results are appended (Search-R1: the passages; Search-o1:
what a Reason-in-Documents call condensed from them), and the model continues, until it answers, stops
without a search, runs out of tokens, or reaches the search or turn limit. Queries run concurrently
(``concurrency`` requests in flight); one query's failure never stops the others. A retrieval server
(``--search-with URL``, ``r2med.agent.remote``) gets the searches of concurrent queries in one request
(``_batched_search``).

Every LLM response is appended to ``<out>/agent-cache.jsonl`` before it is used (keyed by model, prompt,
stop strings and sampling): a killed run, rerun, replays the finished requests from the cache and sends
only the ones it never finished. Searches are deterministic (one text at a time, the same index), so a
replayed query rebuilds the same prompts. At the end, in dataset order:

- ``<out>/query_with_hydoc.jsonl``: the official expansion file (``hy_doc``: the answer, see ``answer_of``);
- ``<out>/trajectories.jsonl``: per query every turn's text, finish reason, tokens; every search's query,
  returned ids and scores, the condensed documents (Search-o1); the stop reason and the answer;
- ``<out>/summary.json``: the configuration and the counts;

and :class:`AgentReport` carries the agent's own ranking (every document its searches returned, fused by RRF).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from r2med import __version__
from r2med.agent import styles as st
from r2med.agent.config import STOP_REASONS, AgentConfig
from r2med.agent.context import context_window, is_context_error
from r2med.agent.outputs import (
    CACHE_FILE,
    EXPANSION_FILE,
    RRF_K,
    SUMMARY_FILE,
    TRAJECTORIES_FILE,
    AgentReport,
    agent_ranking,
    answer_of,
    expansion_rows,
    write_strict,
)
from r2med.agent.search import CorpusSearcher, search_r1_contents
from r2med.agent.templates import resolve_template
from r2med.datasets.model import Dataset
from r2med.errors import InvalidInputError, MissingResourceError, ProviderError
from r2med.http import safe_url
from r2med.io.aio import run_sync
from r2med.io.atomic import remove_file
from r2med.io.progress import progress_bar

#: re-exported: the loop's configuration, outputs and file names live in ``config`` and ``outputs``
__all__ = ["CACHE_FILE", "EXPANSION_FILE", "RRF_K", "STOP_REASONS", "SUMMARY_FILE", "TRAJECTORIES_FILE", "AgentConfig",
           "AgentReport", "agent_ranking", "answer_of", "run_agent"]

logger = logging.getLogger(__name__)


def _check_stored(record: dict[str, Any], path: Any, key: str) -> None:
    """``InvalidInputError`` (exit 5) naming the cache file, the key and the fix for a stored answer that is not one
    r2med wrote (an edited line): a ``text`` that is not a string, a ``stop`` neither text nor null."""
    problems = []
    if not isinstance(record.get("text"), str):
        problems.append("no 'text' string")
    if not (record.get("stop") is None or isinstance(record.get("stop"), str)):
        problems.append("a 'stop' that is neither text nor null")
    if problems:
        raise InvalidInputError(f"{path}: the stored answer with key {key} has {' and '.join(problems)}; delete that "
                                "line to request it again")


class _Stop(Exception):
    """Ends one query's loop with a reason (budget) without an error."""


#: ``run_agent(window=LEARN)``: learn the context from ``--context-length`` or the server
LEARN: Any = object()


class _ContextFull(Exception):
    """A prompt that leaves no room in the server's context: the query ends ``context-full``, its output kept."""

    def __init__(self, details: dict[str, Any]) -> None:
        super().__init__(str(details))
        self.details = details


class _Engine:
    """One dataset's agent run: the client, the cache, the searcher, and the per-query loops."""

    def __init__(self, config: AgentConfig, searcher: CorpusSearcher, client: Any, cache: Any,
                 report: AgentReport, tokens: Any = None, window: Any = None, counter: Any = None,
                 template: tuple[Any, str] | None = None) -> None:
        self.config = config
        #: the context budget (``r2med.agent.context``): the server's context per request and what counts a prompt
        self.window = window
        self.counter = counter
        self.style = st.agent_style(config.style)
        self.protocol = config.protocol_row
        self.tokens = tokens
        self.token_cache: dict[str, list[int]] = {}
        self.token_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="r2med-tokens")
        #: the template that wraps the prompts and how it was chosen (``templates.resolve_template``)
        self.template, self.template_source = template or resolve_template(str(config.llm_model), config.chat_template)
        self.searcher = searcher
        self.client = client
        self.cache = cache
        self.report = report
        self.search_cache: dict[str, list[tuple[str, float]]] = {}
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="r2med-search")
        self.halt: BaseException | None = None
        self.extra = self.style.extra(config.llm_model)
        #: key -> the request for it now in flight (a second query asking the same waits for it)
        self.in_flight: dict[str, asyncio.Future[dict[str, Any]]] = {}
        #: a retrieval server (``--search-with URL``): searches of concurrent queries go in one request
        self.batched = bool(getattr(searcher, "batched", False))
        self.active = self.searching = 0  # queries running; of them, waiting for a search
        self.search_waiting: dict[str, asyncio.Future[list[tuple[str, float]]]] = {}
        self.search_sent: dict[str, asyncio.Future[list[tuple[str, float]]]] = {}
        self.search_task: asyncio.Future[None] | None = None
        self.search_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ LLM and search
    def params(self, *, reason_in_documents: bool = False) -> Any:
        """The main loop's sampling, or (``reason_in_documents``) Search-o1's fixed one for condensing documents."""
        from r2med.llm.client import SamplingParams

        if reason_in_documents:
            return SamplingParams(**st.O1_REASON_SAMPLING, max_tokens=self.config.max_tokens, seed=self.config.seed)
        return self.config.sampling()  # resolved: the style's defaults filled in; "none" sends no value

    async def generate(self, prompt: str, stop: tuple[str, ...], *, reason_in_documents: bool = False) -> dict[str, Any]:
        """A completion of ``prompt``: from the cache, else requested and appended to the cache before it is used.

        Two queries may send the same request at once (Search-o1's Reason-in-Documents prompt holds no question:
        two queries that open with the same search make the same one); the second waits for the first's
        response instead of sending it again, so every query uses the one response the cache keeps (a sampled
        second response would be what a resumed run replays for both)."""
        from r2med.llm.client import request_key

        params = self.params(reason_in_documents=reason_in_documents)
        clamped = None
        if self.window is not None:  # the context budget: max_tokens clamped to the room the prompt leaves
            used = await self.count(prompt)
            room = self.window.length - used
            if room < 1:
                raise _ContextFull({"request": "reason-in-documents" if reason_in_documents else "turn",
                                    "prompt_tokens": used, "context_length": self.window.length})
            if params.max_tokens is None or params.max_tokens > room:
                params = dataclasses.replace(params, max_tokens=room)
                clamped = room
        extra = dict(st.O1_REASON_EXTRA) if reason_in_documents else self.extra
        key = request_key(self.config.llm_model, [{"role": "completion", "content": prompt}], params,
                          extra={"stop": list(stop), **extra})
        clamp = {} if clamped is None else {"max_tokens": clamped}  # shown in the turn, not stored in the cache
        record = self.cache.get(key)
        if record is not None:
            _check_stored(record, self.cache.path, key)
            self.report.cached_calls += 1
            return {**record, **clamp}
        pending = self.in_flight.get(key)
        if pending is not None:
            record = await asyncio.shield(pending)
            self.report.cached_calls += 1
            return {**record, **clamp}
        if self.halt is not None:
            raise _Stop("stopped")
        task = asyncio.ensure_future(self._request(key, prompt, params, stop, extra))
        self.in_flight[key] = task
        task.add_done_callback(lambda _: self.in_flight.pop(key, None))
        return {**await asyncio.shield(task), **clamp}

    async def _request(self, key: str, prompt: str, params: Any, stop: tuple[str, ...],
                       extra: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.complete_text(prompt, params, stop=stop, extra=extra)
        record = {"text": result.text, "finish_reason": result.finish_reason, "stop": result.stop,
                  "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                  "seconds": round(result.seconds, 3), "attempts": result.attempts, "model": self.config.llm_model,
                  "r2med": __version__}
        self.cache.append(key, record)
        self.report.llm_calls += 1
        return record

    def contents(self, docid: str) -> str:
        """A returned document as Search-R1's passages show it (a server's contents as it sent them)."""
        if self.batched:
            return self.searcher.contents[docid]
        return search_r1_contents(docid, self.searcher.documents[docid])

    def text(self, docid: str) -> str:
        """A returned document's text (Search-o1's documents)."""
        return self.searcher.text(docid) if self.batched else self.searcher.documents[docid]

    async def search(self, query: str) -> list[tuple[str, float]]:
        """The top k of ``query``; a query searched before in this run is answered from the run's search cache."""
        if query in self.search_cache:
            self.report.repeated_searches += 1
            return self.search_cache[query]
        if self.batched:
            return await self._batched_search(query)
        loop = asyncio.get_running_loop()
        hits = await loop.run_in_executor(self.executor, self.searcher.search, [query], int(self.config.search_top_k))
        self.report.search_calls += 1
        self.search_cache[query] = hits[0]
        return hits[0]

    # ------------------------------------------------------------------ a retrieval server's batches
    async def _batched_search(self, query: str) -> list[tuple[str, float]]:
        """``query``'s top k from a retrieval server, in one request with the searches of the other queries.

        One request at a time: searches asked while one is in flight wait for the next. The next goes at once when
        every running query waits for a search (Search-R1's batched rollout: one request per round), else when
        the first of them has waited ``search_wait`` seconds (queries still generating join a later one)."""
        future = self.search_waiting.get(query) or self.search_sent.get(query)
        if future is not None:  # the same text asked by another query: one search answers both
            self.report.repeated_searches += 1
        else:
            future = self.search_waiting[query] = asyncio.get_running_loop().create_future()
        self.searching += 1
        try:
            self._maybe_send()
            return list(await asyncio.shield(future))
        finally:
            self.searching -= 1

    def _maybe_send(self) -> None:
        if self.search_task is not None or not self.search_waiting:
            return
        if self.searching >= self.active or self.halt is not None:
            self._send_batch()
        elif self.search_timer is None:
            self.search_timer = asyncio.get_running_loop().call_later(float(self.config.search_wait), self._send_batch)

    def _send_batch(self) -> None:
        if self.search_timer is not None:
            self.search_timer.cancel()
            self.search_timer = None
        if self.search_task is not None or not self.search_waiting:
            return
        batch, self.search_waiting = self.search_waiting, {}
        self.search_sent = batch
        self.search_task = asyncio.ensure_future(self._send(batch))

    async def _send(self, batch: dict[str, asyncio.Future[list[tuple[str, float]]]]) -> None:
        try:
            found = await self.searcher.asearch(list(batch), int(self.config.search_top_k))
        except BaseException as exc:  # noqa: BLE001 - every query waiting for this request gets its failure
            for future in batch.values():
                if not future.done():
                    future.set_exception(exc)
                    future.exception()  # retrieved: a query that left does not warn
        else:
            self.report.search_calls += len(batch)
            self.report.search_requests += 1
            for (query, future), hits in zip(batch.items(), found):
                self.search_cache[query] = hits
                if not future.done():
                    future.set_result(hits)
        finally:
            self.search_task, self.search_sent = None, {}
            self._maybe_send()

    def _leave(self) -> None:
        """A query's loop ended: the searches of the others may now all be waiting."""
        self.active -= 1
        if self.batched:
            self._maybe_send()

    # ------------------------------------------------------------------ one query
    async def run_query(self, qid: str, question: str) -> dict[str, Any]:
        style = self.style
        if style.name == "search-r1":
            user = st.r1_prompt(question)
        else:
            user = st.o1_prompt(question, max_searches=int(self.config.max_searches), model=self.config.llm_model)
        prompt = self.template.wrap(user)
        row: dict[str, Any] = {"id": qid, "question": question, "style": style.name, "llm": self.config.name,
                               "prompt": prompt, "turns": [], "searches": [], "output": "", "stop_reason": None,
                               "answer": None, "error": None}
        if self.batched:  # the server searched (its URL, and its corpus where it says)
            row["search_server"] = self.searcher.config()
        self.active += 1
        try:
            await self.loops[self.protocol.loop](self, row)
        except _ContextFull as full:  # no room for another generation: the query ends here, its output kept
            row["stop_reason"], row["context_full"] = "context-full", full.details
        except _Stop:  # another query's request stopped the run
            from r2med.llm.client import BudgetExceeded

            budget = isinstance(self.halt, BudgetExceeded)
            row["stop_reason"], row["error"] = ("budget", None) if budget else ("error", f"not run: {self.halt}")
        except ProviderError as exc:
            from r2med.llm.client import BudgetExceeded

            if isinstance(exc, BudgetExceeded):
                row["stop_reason"] = "budget"
                self.halt = self.halt or exc
            elif is_context_error(exc):  # the server's refusal of a prompt past its context (no budget known)
                row["stop_reason"], row["context_full"] = "context-full", {"error": str(exc)}
            else:
                row["stop_reason"], row["error"] = "error", str(exc)
                if getattr(exc, "fatal", False):  # bad key, unknown model: no other query can do better
                    self.halt = self.halt or exc
        except (MissingResourceError, InvalidInputError) as exc:  # the server refuses connections, or an edited
            row["stop_reason"], row["error"] = "error", str(exc)  # cache line: no other query can do better
            self.halt = self.halt or exc
        except Exception as exc:
            logger.warning("query %r failed: %s: %s", qid, type(exc).__name__, exc, exc_info=logger.isEnabledFor(10))
            row["stop_reason"], row["error"] = "error", f"{type(exc).__name__}: {exc}"
        finally:
            self._leave()
        row["answer"] = answer_of(self.protocol.answer_rule, row)
        return row

    async def _turn(self, row: dict[str, Any], prompt: str) -> tuple[str, dict[str, Any], bool]:
        """One generation: its text (the closing tag put back when the server stopped at it), the record, and
        whether the turn ended by closing a search query."""
        open_tag, close_tag = self.style.search_tags
        record = await self.generate(prompt, self.style.stop)
        text = record["text"]
        closed = record["finish_reason"] == "stop" and (
            record.get("stop") == close_tag or (record.get("stop") is None and st.opens_unclosed(text, open_tag, close_tag)))
        if closed:
            text += close_tag
        # no wall-clock times: a resumed run writes the same file as an uninterrupted one (the cache keeps the times)
        row["turns"].append({"text": text, "finish_reason": record["finish_reason"], "stop": record.get("stop"),
                             "prompt_tokens": record["prompt_tokens"], "completion_tokens": record["completion_tokens"]})
        if "max_tokens" in record:  # clamped by the context budget
            row["turns"][-1]["max_tokens"] = record["max_tokens"]
        return text, record, closed

    async def _r1_infer(self, row: dict[str, Any]) -> None:
        """infer.py's loop: a turn ended by the end-of-sequence token ends the query; any other (closed at
        ``</search>`` or cut by max_tokens) searches the last ``<search>`` query of the whole text ('' results when
        there is none) and goes on. ``stop_on_repeat``: r2med's earlier stops (the query from this turn only; an
        empty, repeated or unclosed one ends the query)."""
        last_query = None
        for _ in range(int(self.config.max_turns)):
            text, record, closed = await self._turn(row, row["prompt"] + row["output"])
            if self.config.stop_on_repeat:
                query = st.last_between(text, *st.R1_SEARCH) if closed else None
                ended = query is None
            else:
                ended = not closed and record["finish_reason"] != "length"  # infer.py:109-113
                query = None if ended else st.r1_infer_query(row["prompt"] + row["output"] + text)
            if ended:
                row["output"] += text
                if st.first_between(text, *st.R1_ANSWER) is not None:
                    row["stop_reason"] = "answer"
                else:
                    row["stop_reason"] = "length" if record["finish_reason"] == "length" else "no-answer"
                return
            reason = self._refuse(row, query, last_query) if self.config.stop_on_repeat else (
                "search-limit" if query and len(row["searches"]) >= int(self.config.max_searches) else None)
            if reason is not None:
                row["output"] += text
                row["stop_reason"] = reason
                return
            passages = ""
            if query:  # infer.py:119: an empty query (or none) gets '' as its results
                hits = await self.search(query.strip())
                passages = st.r1_passages([self.contents(did) for did, _ in hits])
                row["searches"].append(_search_row(query.strip(), hits))
            else:
                row["turns"][-1]["note"] = "no search query: empty results"
            row["output"] += st.r1_information(text, passages)
            last_query = query
        row["stop_reason"] = "max-turns"

    async def _r1_eval(self, row: dict[str, Any]) -> None:
        """Search-R1's evaluation loop (generation.py ``run_llm_loop``): each response cut after its first
        ``</search>`` (else ``</answer>``); its first search/answer pair is its action; an answer ends the query, a
        search appends the stripped passages as an observation, anything else the "invalid action" message; every
        observation is cut to its first ``max_obs_tokens`` tokens and each prompt is the last
        ``max_context_tokens`` tokens of prompt + responses + observations; after ``max_turns`` turns a final one
        runs without search."""
        proto = self.protocol
        max_obs, max_ctx = proto.max_obs_tokens, proto.max_context_tokens
        ids = list(await self.encode(row["prompt"]))
        response_ids: list[int] = []  # the responses and observations, as Search-R1 scores them
        last_query = None
        turns = int(self.config.max_turns) + (1 if proto.final_turn else 0)
        for step in range(turns):
            final = proto.final_turn and step == turns - 1
            prompt = row["prompt"] + row["output"]
            if max_ctx is not None and len(ids) > max_ctx:  # generation.py:107-112, new_input_ids[:, -max_len:]
                prompt = await self.decode(ids[-max_ctx:])
            text, record, _ = await self._turn(row, prompt)
            turn = row["turns"][-1]
            turn["context_tokens"] = len(ids)
            if max_ctx is not None and len(ids) > max_ctx:
                turn["context_cut"] = len(ids) - max_ctx
            response = st.r1_eval_response(text)
            if response != text:
                turn["text"], turn["dropped"] = response, text[len(response):]
            action, content = st.r1_eval_action(response)
            new = list(await self.encode(response))
            if action == "answer" or final:
                row["output"] += response
                response_ids += new
                row["stop_reason"] = "answer" if action == "answer" else "max-turns"
                break
            reason = None
            if self.config.stop_on_repeat:
                if record["finish_reason"] == "length" and action is None:
                    reason = "length"
                elif action == "search":
                    reason = self._refuse(row, content, last_query)
            elif action == "search" and len(row["searches"]) >= int(self.config.max_searches):
                reason = "search-limit"
            if reason is not None:
                row["output"] += response
                response_ids += new
                row["stop_reason"] = reason
                break
            if action == "search":
                passages = ""
                if content:  # an empty query searches nothing (a retriever has no results for it)
                    hits = await self.search(content)
                    passages = st.r1_passages([self.contents(did) for did, _ in hits])
                    row["searches"].append(_search_row(content, hits))
                observation = st.R1_EVAL_OBSERVATION.format(search_results=passages.strip())
                last_query = content
            else:
                observation = st.R1_INVALID
                turn["note"] = "invalid action"
            obs = list(await self.encode(observation))
            if max_obs is not None and len(obs) > max_obs:  # generation.py:87-89, the first max_obs_length tokens
                turn["observation_cut"] = len(obs) - max_obs
                obs = obs[:max_obs]
                observation = await self.decode(obs)
            row["output"] += response + observation
            ids += new + obs
            response_ids += new + obs
        if max_ctx is not None and len(response_ids) > max_ctx:  # the scored responses: their first max_len tokens
            row["scored_output"] = await self.decode(response_ids[:max_ctx])

    async def encode(self, text: str) -> list[int]:
        if text not in self.token_cache:
            loop = asyncio.get_running_loop()
            self.token_cache[text] = await loop.run_in_executor(self.token_executor, self.tokens.encode, text)
        return self.token_cache[text]

    async def count(self, text: str) -> int:
        """The tokens ``text`` takes as a prompt (the context budget's counter; not cached: prompts are long)."""
        loop = asyncio.get_running_loop()
        return int(await loop.run_in_executor(self.token_executor, self.counter.count, text))

    async def decode(self, ids: list[int]) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.token_executor, self.tokens.decode, ids)

    def _refuse(self, row: dict[str, Any], query: str, last_query: str | None) -> str | None:
        if not query:
            return "empty-search"
        if len(row["searches"]) >= int(self.config.max_searches):
            return "search-limit"
        if query == last_query:
            return "repeated-search"
        return None

    async def _o1(self, row: dict[str, Any]) -> None:
        executed: set[str] = set()
        for _ in range(int(self.config.max_turns)):
            text, record, _ = await self._turn(row, row["prompt"] + row["output"])
            row["output"] += text
            query = st.last_between(text, st.BEGIN_SEARCH_QUERY, st.END_SEARCH_QUERY)
            asked = row["output"].rstrip().endswith(st.END_SEARCH_QUERY)
            if not (query and asked):  # as the authors' loop: the query is finished
                if asked and query == "":
                    row["stop_reason"] = "empty-search"
                else:
                    row["stop_reason"] = "length" if record["finish_reason"] == "length" else "answer"
                return
            if len(executed) >= int(self.config.max_searches):
                row["output"] += st.O1_LIMIT_MESSAGE
                row["turns"][-1]["note"] = "search limit message"
                continue
            if query in executed:
                row["output"] += st.O1_REPEAT_MESSAGE
                row["turns"][-1]["note"] = "repeated query message"
                continue
            hits = await self.search(query)
            documents = st.o1_documents([(did, self.text(did)) for did, _ in hits])
            condense = st.O1_REASON_IN_DOCUMENTS.format(prev_reasoning=st.o1_prev_reasoning(row["output"]),
                                                        search_query=query, document=documents)
            raw = await self.generate(self.template.wrap(condense), (), reason_in_documents=True)
            analysis = st.o1_condensed(raw["text"])
            row["searches"].append({**_search_row(query, hits), "condensed": analysis,
                                    "reason_in_documents": {"text": raw["text"], "finish_reason": raw["finish_reason"],
                                                            "prompt_tokens": raw["prompt_tokens"],
                                                            "completion_tokens": raw["completion_tokens"]}})
            row["output"] += st.o1_result_block(analysis)
            executed.add(query)
        row["stop_reason"] = "max-turns"


    #: a protocol's loop (``Protocol.loop``) -> the method that runs it
    loops: ClassVar[dict[str, Any]] = {"r1-eval": _r1_eval, "r1-infer": _r1_infer, "o1": _o1}


def _search_row(query: str, hits: list[tuple[str, float]]) -> dict[str, Any]:
    return {"query": query, "ids": [did for did, _ in hits], "scores": [score for _, score in hits]}


def _report_cut(report: AgentReport, searcher: Any, before: dict[str, int], topk: int) -> None:
    """What a retrieval server sent that the agent dropped in this run (``report.search_cut``), said once."""
    cut = {name: count - before.get(name, 0) for name, count in getattr(searcher, "cut", {}).items()}
    if not any(cut.values()):
        return
    report.search_cut = cut
    logger.warning("%s: the retrieval server %s sent more than was asked: %d results past topk %d and %d repeats of a "
                   "document already listed in %d requests; the agent kept the first %d distinct documents of each "
                   "search (as a server that obeys topk sends)", report.dataset, safe_url(str(searcher.url)),
                   cut.get("beyond_topk", 0), topk, cut.get("repeated", 0), report.search_requests, topk)


def run_agent(
    dataset: Dataset,
    config: AgentConfig,
    searcher: CorpusSearcher,
    *,
    out_dir: Path,
    client: Any = None,
    top_k: int = 100,
    progress: bool = True,
    tokens: Any = None,
    template_given: bool | None = None,
    window: Any = LEARN,
) -> AgentReport:
    """Run the agent on every query of ``dataset``; write the expansion file, the trajectories and the summary.

    ``client`` defaults to a ``ChatClient`` for the config (``max_requests`` as its budget); ``tokens`` (a
    protocol that cuts in tokens) to the model's tokenizer (``r2med.agent.tokens.token_counter``). Returns the report,
    whose ``run`` is the agent's ranking (``top_k`` per query) and ``failures`` the queries whose requests failed
    (left out of the expansion file; a rerun retries only them). ``template_given``: whether ``config``'s
    ``chat_template`` was the user's (False: a resolved config's, found from the model; None: as it stands).
    ``window``: the context per request the caller learned (and keyed its result with; None: unknown), else learned
    here (``r2med.agent.context.context_window``). A fatal provider error (bad key, no server) or
    a spent budget stops new requests; what finished is written before it is raised.
    """
    from r2med.llm.cache import ResponseCache
    from r2med.llm.client import Budget

    start = time.perf_counter()
    # a config resolved by the caller names the template it found: ``template_given`` False says how it was found
    template = resolve_template(str(config.llm_model), None if template_given is False else config.chat_template,
                                config.name)
    config = config.resolved()
    out_dir = Path(out_dir)
    report = AgentReport(dataset.name, config.style, config.name, queries=len(dataset.queries),
                         protocol=str(config.protocol))
    report.paths = {"cache": out_dir / CACHE_FILE, "expansions": out_dir / EXPANSION_FILE,
                    "trajectories": out_dir / TRAJECTORIES_FILE, "summary": out_dir / SUMMARY_FILE}
    client = client or config.client(str(config.base_url), budget=Budget(max_requests=config.max_requests))
    cache = ResponseCache(report.paths["cache"])
    cache.open_for_append()  # before the first request: an answer that cannot be kept is not paid for
    # what the agent asks of the LLM server itself (its tokenizer, its context) carries its completions' key
    asks_server = window is not None or (tokens is None and config.protocol_row.needs_tokens)
    http = {"secret": config.secret() if asks_server else None, "timeout": config.timeout,
            "max_retries": config.max_retries}
    if tokens is None and config.protocol_row.needs_tokens:
        from r2med.agent.tokens import token_counter

        tokens = token_counter(config.llm_model, str(config.base_url), **http)
    if window is LEARN:
        window = context_window(str(config.base_url), config.llm_model, given=config.context_length,
                                secret=http["secret"], timeout=config.timeout)
    counter = None
    if window is not None:
        from r2med.agent.tokens import prompt_counter

        counter = prompt_counter(config.llm_model, str(config.base_url), **http,
                                 tokens=tokens if hasattr(tokens, "count") else None)
        logger.info("%s: context %d tokens per request (%s); prompts counted by %s", dataset.name, window.length,
                    window.source, counter.source)
    else:
        logger.info("%s: the server's context length is unknown (pass --context-length): max-tokens is not clamped",
                    dataset.name)
    engine = _Engine(config, searcher, client, cache, report, tokens, window, counter, template)
    cut_before = dict(getattr(searcher, "cut", {}))  # a retrieval server's dropped results, before this dataset
    # shown with -v (the CLI keeps a failure one line: nothing is printed before the work); the count line names the protocol
    logger.info("%s: protocol %s, template: %s", dataset.name, config.protocol, engine.template_source)
    bar = progress_bar(len(dataset.queries), desc=f"{dataset.name}: {config.style} {config.name}", unit="query",
                       enabled=progress)

    async def main() -> list[dict[str, Any]]:
        gate = asyncio.Semaphore(int(config.concurrency))

        async def one(qid: str, text: str) -> dict[str, Any]:
            async with gate:
                row = await engine.run_query(qid, text)
            bar.update(1)
            bar.set_postfix(llm=report.llm_calls, cached=report.cached_calls, searches=report.search_calls,
                            refresh=False)
            return row

        try:
            return list(await asyncio.gather(*(one(q, t) for q, t in dataset.queries.items())))
        finally:
            for closing in (client, searcher):
                aclose = getattr(closing, "aclose", None)
                if aclose is not None:
                    await aclose()

    try:
        rows = run_sync(lambda _send: main())
    finally:
        bar.close()
        cache.close()
        engine.executor.shutdown(wait=True)
        engine.token_executor.shutdown(wait=True)
    report.trajectories = rows
    _report_cut(report, searcher, cut_before, int(config.search_top_k))
    report.run = agent_ranking(rows, top_k=top_k, name=f"{config.style}-{config.name}")
    written = expansion_rows(dataset, config, rows, report)
    write_strict(report.paths["trajectories"], rows)
    if written:
        write_strict(report.paths["expansions"], written)
    else:  # no row: an earlier run's file must not stand in for this one (``r2med run --expansion`` would read it)
        remove_file(report.paths["expansions"])
    report.seconds = time.perf_counter() - start
    if engine.halt is not None:
        report.stopped = str(engine.halt)
    summary = {"report": report.as_dict(), "config": {**config.key(), "llm_name": config.name,
                                                     "base_url": safe_url(config.base_url)},
               "search": searcher.config(), "top_k": top_k, "r2med": __version__,
               "context": {**window.as_dict(), "counted_by": counter.source} if window is not None else None,
               "template": engine.template_source}
    write_strict(report.paths["summary"], document=summary)
    if report.failures:
        logger.warning("%s: %d of %d queries failed and are not in %s (rerun to retry them); first: %s",
                       dataset.name, len(report.failures), report.queries, report.paths["expansions"],
                       next(iter(report.failures.items())))
    if engine.halt is not None:
        raise engine.halt
    return report


