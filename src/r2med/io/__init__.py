"""The low input/output layer that ``datasets``, ``store`` and the rest share.

``readers``: streaming readers for JSONL rows and qrels files (BEIR TSV, TREC, R2MED JSONL) that hash
what they read; ``ids``: the one rule for query and document ids (what a TREC run line can hold),
checked by every reader; ``problems``: the collector of what is wrong with an input file, by file and line;
``atomic``: writes that readers never see half done (and the removal of what killed writes left);
``digest``: a file's sha256 and size; ``verified``: the one reader of stored files (results, indexes,
embeddings, scores), which uses nothing that does not match the checksum recorded when it was written;
``lock``: one writer per results directory; ``names``: the one check of names that become path components;
``dirs``: whether an output or cache directory is usable; ``jsonsafe``: JSON parsing within Python's limits.
These modules import nothing from ``r2med`` but its lowest modules (``errors``, ``types``, ``settings``,
``registry``); this file imports nothing.
"""
