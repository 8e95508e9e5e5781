"""Hybrid retrieval shared by the memory and the documents: one index (chunks, trigram and CJK
keyword tables, vectors), one fusion (RRF, floors), one `Hit`, one indexing thread class."""

from engine.retrieval.fusion import RRF_K, Hit, Hits, Rules, fuse
from engine.retrieval.index import Candidates, HybridIndex, Tables
from engine.retrieval.worker import IndexWorker

__all__ = ["RRF_K", "Candidates", "Hit", "Hits", "HybridIndex", "IndexWorker", "Rules", "Tables", "fuse"]
