"""Reporting: tables for the terminal and files."""

#: the most queries whose texts and documents the HTML report holds in its own page (about 12 KB each with two
#: systems' top 10 documents of 400 characters); a larger drill-down goes to one page per dataset beside it
#: (``r2med.reporting.report``). Here, so that ``r2med report --help`` says it without loading the report's modules.
INLINE_QUERIES = 300
