"""Agentic search: Search-R1 and Search-o1 loops over any r2med retriever, and Search-R1's retrieval API.

- ``styles``: the two protocols' prompts, tags, stop strings and result blocks (pure strings);
- ``templates``: chat templates for text completion;
- ``search``: any retriever opened over a corpus for repeated searches (``open_searcher``);
- ``config``: ``AgentConfig`` (style, LLM, limits, the authors' defaults) and the stop reasons;
- ``loop``: the concurrent, resumable agent loop (``run_agent``);
- ``outputs``: the report, the answer of a trajectory, the agent's ranking, the expansion rows;
- ``retrieve_api``: Search-R1's ``/retrieve`` request checked and answered (pure data);
- ``retrieve_stream``: a ``/retrieve`` answer in bounded memory (hits as arrays, the JSON made as it is sent);
- ``server``: ``r2med serve``, the HTTP server for it over an r2med searcher.

Importing this package imports nothing heavy.
"""
