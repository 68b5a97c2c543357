"""Per-dataset statistics as in R2MED's README table: #Q, #D, avg positives, avg lengths in words."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from r2med.datasets.model import Dataset


@dataclass(frozen=True)
class DatasetStats:
    """Statistics of one dataset; lengths are whitespace-separated words."""

    name: str
    queries: int
    documents: int
    avg_positives: float
    query_len: float
    doc_len: float

    def as_dict(self) -> dict:
        return asdict(self)


def compute_stats(dataset: Dataset) -> DatasetStats:
    """Statistics over the scored queries (those with judgements) and the distinct documents.

    #Q counts judged queries; avg positives averages, over them, the documents judged > 0;
    query length averages over them; document length over the distinct documents (last row wins).
    """
    judged = dataset.judged_query_ids
    corpus = dataset.corpus
    n_q = len(judged)
    positives = sum(dataset.qrels.n_positive(qid) for qid in judged)
    q_words = sum(len(dataset.queries[qid].split()) for qid in judged)
    d_words = sum(len(text.split()) for text in corpus.values())
    return DatasetStats(
        name=dataset.name,
        queries=n_q,
        documents=len(corpus),
        avg_positives=positives / n_q if n_q else 0.0,
        query_len=q_words / n_q if n_q else 0.0,
        doc_len=d_words / len(corpus) if corpus else 0.0,
    )


def stats_markdown(rows: list[DatasetStats]) -> str:
    """The README's table: one row per dataset, averages to 1 decimal."""
    lines = ["| Dataset | #Q | #D | Avg. Pos | Q-Len | D-Len |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.name} | {r.queries} | {r.documents} | {r.avg_positives:.1f} | {r.query_len:.1f} | {r.doc_len:.1f} |")
    return "\n".join(lines)
