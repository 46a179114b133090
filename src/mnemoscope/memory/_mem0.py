"""A :class:`LongTermMemoryBase` over mem0 (``pip install 'mnemoscope[mem0]'``).

Example::

    from mnemoscope.embedding import LocalEmbeddingModel
    from mnemoscope.memory import Mem0LongTermMemory

    store = Mem0LongTermMemory(
        chat_model=mem0_chat_model,            # a model instance the agent does not use
        embedding_model=LocalEmbeddingModel(),  # 384 dims, offline
        path="/tmp/mem0_demo",                 # local Qdrant directory
    )
    await store.record("I prefer dark-mode charts.", user_id="alice")
    items = await store.retrieve("chart style", user_id="alice")
    await store.update(items[0].id, "I prefer light charts.", user_id="alice")
    await store.aclose()

Beyond ``record``/``retrieve`` it has the native store's management calls (``list``,
``get``, ``update``, ``delete``, ``history``), each scoped to one user, on the open-source
``mem0.AsyncMemory`` (see :mod:`mnemoscope.memory._mem0_manage`).

Three ways to build it (the first that applies wins):

1. ``client=``: a pre-built ``mem0.AsyncMemory`` (open source) or ``mem0.AsyncMemoryClient``
   (hosted Platform), used as is and never closed by us. The synchronous ``mem0.Memory``
   / ``mem0.MemoryClient`` are rejected.
2. ``mem0_config=`` (a ``mem0.configs.base.MemoryConfig`` or a dict): an ``AsyncMemory``
   from a copy of it in which only the ``llm``/``embedder`` slots are replaced by
   ``chat_model``/``embedding_model`` (those given).
3. ``chat_model=`` and ``embedding_model=``: an ``AsyncMemory`` with mem0's default Qdrant
   store, in local mode at ``path`` (default ``$MNEMOSCOPE_MEM0_PATH``, else mem0's
   ``/tmp/qdrant``), collection ``"mem0"`` sized to ``embedding_model.dimensions``, history
   database ``<path>/mem0_history.db``.

Local Qdrant locks its directory to one client per process; every store built here on the
same directory shares one ``QdrantClient`` (a process-wide, reference-counted registry),
so two middlewares on one path work. An existing collection whose vector size differs from
the embedding model's fails at construction, naming both sizes and the fix.

The models given to the store run on the bridge event loop (see ``_mem0_bridge``) and are
dedicated to mem0: the store closes them there, with the last store using them, because
their connections belong to that loop (closing them later from another loop fails with
"Event loop is closed"). Do not reuse them after :meth:`Mem0LongTermMemory.aclose`.

mem0's anonymous telemetry is turned off (``MEM0_TELEMETRY=False``) unless the variable is
already set when mnemoscope first imports mem0: it phones home and opens a second Qdrant
store under ``~/.mem0``. mem0 reads the variable once, when it is imported, so this module
must be imported *before* mem0 (import ``Mem0Middleware`` first); when mem0 was imported
first with the variable unset, a warning says telemetry is on.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, TypeVar

from mnemoscope._optional import require
from mnemoscope._redact import redact_text, redact_url
from mnemoscope.embedding import EmbeddingModelBase
from mnemoscope.errors import MemoryExtractionError, MemoryStoreError, UserError
from mnemoscope.memory._long_term_base import (
    LongTermMemoryBase,
    MemoryItem,
    MemoryScope,
    RecordEvent,
    RecordInput,
    RecordRequest,
    RecordResult,
    RetrieveRequest,
)
from mnemoscope.memory._mem0_manage import Mem0Management, item_from_row, scope_ids
from mnemoscope.memory._mem0_qdrant import QDRANT_CLIENTS
from mnemoscope.message import Msg
from mnemoscope.model import ChatModelBase

logger = logging.getLogger("mnemoscope.memory.mem0")

_E = TypeVar("_E", bound=BaseException)

# before anything imports mem0 through us (see the module docstring)
if "MEM0_TELEMETRY" not in os.environ and "mem0.memory.telemetry" in sys.modules:
    # mem0 read the variable when it was imported: too late to turn telemetry off
    logger.warning(
        "mem0 was imported before mnemoscope's mem0 support with MEM0_TELEMETRY unset, so "
        "mem0's telemetry is on in this process. Set MEM0_TELEMETRY=False in the "
        "environment, or import mnemoscope.middleware.Mem0Middleware (or "
        "mnemoscope.memory.Mem0LongTermMemory) before anything imports mem0."
    )
os.environ.setdefault("MEM0_TELEMETRY", "False")

DEFAULT_PATH = "/tmp/qdrant"
"""mem0's default local Qdrant directory (used when neither ``path`` nor the env var is set)."""
PATH_ENV = "MNEMOSCOPE_MEM0_PATH"
DEFAULT_COLLECTION = "mem0"
HISTORY_DB_NAME = "mem0_history.db"

_EVENTS = {"ADD": "add", "UPDATE": "update", "DELETE": "delete", "NONE": "skip", "NOOP": "skip"}


def import_mem0() -> Any:
    """Import mem0 with telemetry off by default (see the module docstring)."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    return require("mem0", extra="mem0", feature="Mem0LongTermMemory")


def _cleanup(
    memory: Any, bridge: Any, qdrant_key: str | None, models: tuple[Any, ...] = ()
) -> None:
    try:
        if memory is not None:
            memory.close()
    finally:
        if qdrant_key is not None:
            QDRANT_CLIENTS.release(qdrant_key)
        if bridge is not None:
            bridge.detach(*models)
            bridge.release()


class _Reaper:
    """Cleans up, in its own thread, the stores the garbage collector found unreachable.

    A finalizer runs wherever the collector interrupts the program, possibly inside a
    call that holds the Qdrant registry's or the bridge's lock; taking that lock again
    there would deadlock the thread. So the finalizer only queues the work (a
    ``SimpleQueue.put`` takes no lock) and this thread does it. At exit what is still
    queued runs inline.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._exiting = False
        self._queued: list[None] = []  # one entry per queued cleanup (append takes no lock)
        self._done = 0

    def start(self) -> None:
        """Start the thread (when a store is built: never from a finalizer)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="mnemoscope-mem0-cleanup", daemon=True
                )
                self._thread.start()

    def later(self, *args: Any) -> None:
        """The finalizer of a store: queue its cleanup (inline once the process exits)."""
        if self._exiting:
            self._run(args)
        else:
            self._queued.append(None)
            self._jobs.put(args)

    def _run(self, args: tuple[Any, ...]) -> None:
        try:
            _cleanup(*args)
        except Exception as exc:  # nobody to report to but the log
            logger.warning("cleaning up a Mem0LongTermMemory that was never closed: %s", exc)

    def _serve(self) -> None:
        while True:
            self._run(self._jobs.get())
            self._done += 1  # only this thread writes it

    def wait(self, timeout: float = 30.0) -> bool:
        """Wait until every cleanup queued so far is done; False on timeout."""
        deadline = time.monotonic() + timeout
        while self._done < len(self._queued):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def at_exit(self) -> None:
        self._exiting = True
        while True:
            try:
                args = self._jobs.get_nowait()
            except queue.Empty:
                return
            self._run(args)


_REAPER = _Reaper()
atexit.register(_REAPER.at_exit)


# ---------------------------------------------------------------------- the store
class Mem0LongTermMemory(Mem0Management, LongTermMemoryBase):
    """Long-term memory stored by mem0 (see the module docstring for construction).

    Besides ``record``/``retrieve``, the management calls ``list``, ``get``, ``update``,
    ``delete`` and ``history`` (each scoped to one user) are described in
    :mod:`mnemoscope.memory._mem0_manage`.

    Args:
        client: a pre-built ``mem0.AsyncMemory`` or ``mem0.AsyncMemoryClient``; when given
            the other construction arguments are ignored.
        chat_model: the model mem0 uses to extract facts; it runs on the bridge event loop,
            so do not give the agent this same instance.
        embedding_model: the embedder mem0 uses; its ``dimensions`` must match the store.
        mem0_config: a ``MemoryConfig`` (or dict) to start from.
        path: local Qdrant directory for the models-only path.
        infer: default of :meth:`record`'s ``infer`` (mem0 extracts facts with the LLM).
        bridge_timeout: seconds one bridged model call may take.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        chat_model: ChatModelBase | None = None,
        embedding_model: EmbeddingModelBase | None = None,
        mem0_config: Any = None,
        path: str | None = None,
        infer: bool = True,
        bridge_timeout: float | None = 300.0,
    ) -> None:
        mem0 = import_mem0()
        self.infer = infer
        self.chat_model: ChatModelBase | None = None
        self.embedding_model: EmbeddingModelBase | None = None
        self.path: str | None = None
        self._closed = False
        self._finalizer: weakref.finalize | None = None
        if client is not None:
            if isinstance(client, mem0.Memory | mem0.MemoryClient):
                raise UserError(
                    f"client=mem0.{type(client).__name__}(...) is synchronous; Mem0Middleware "
                    "needs an async mem0 client: pass mem0.AsyncMemory(config) or "
                    "mem0.AsyncMemoryClient(api_key=...) instead"
                )
            if not isinstance(client, mem0.AsyncMemory | mem0.AsyncMemoryClient):
                raise UserError(
                    f"client must be a mem0.AsyncMemory or mem0.AsyncMemoryClient, got "
                    f"{type(client).__name__}"
                )
            if chat_model is not None or embedding_model is not None or mem0_config is not None:
                logger.info(
                    "client= given: chat_model, embedding_model and mem0_config are ignored"
                )
            self.client = client
            self.hosted = isinstance(client, mem0.AsyncMemoryClient)
            self.owns_client = False
            return
        self._build(mem0, chat_model, embedding_model, mem0_config, path, bridge_timeout)

    # ------------------------------------------------------------ construction
    def _build(
        self,
        mem0: Any,
        chat_model: ChatModelBase | None,
        embedding_model: EmbeddingModelBase | None,
        mem0_config: Any,
        path: str | None,
        bridge_timeout: float | None,
    ) -> None:
        from mem0.configs.base import MemoryConfig

        from mnemoscope.memory._mem0_bridge import BRIDGE, bridged_memory_config, discard_tokens

        if chat_model is not None and not isinstance(chat_model, ChatModelBase):
            raise UserError(f"chat_model must be a ChatModelBase, got {type(chat_model).__name__}")
        if embedding_model is not None and not isinstance(embedding_model, EmbeddingModelBase):
            raise UserError(
                "embedding_model must be an EmbeddingModelBase, got "
                f"{type(embedding_model).__name__}"
            )
        if mem0_config is None:
            if chat_model is None or embedding_model is None:
                raise UserError(
                    "Mem0 needs a backend: pass chat_model= and embedding_model= (a local "
                    "mem0 store is built), add mem0_config= to customise it, or pass a "
                    "pre-built client=mem0.AsyncMemory(...)/AsyncMemoryClient(...)"
                )
            self.path = path or os.environ.get(PATH_ENV) or DEFAULT_PATH
            os.makedirs(self.path, exist_ok=True)
            config = MemoryConfig(
                vector_store={
                    "provider": "qdrant",
                    "config": {
                        "path": self.path,
                        "collection_name": DEFAULT_COLLECTION,
                        "embedding_model_dims": embedding_model.dimensions,
                    },
                },
                history_db_path=os.path.join(self.path, HISTORY_DB_NAME),
            )
        elif isinstance(mem0_config, dict):
            config = MemoryConfig(**mem0_config)
        elif isinstance(mem0_config, MemoryConfig):
            config = mem0_config
        else:
            raise UserError(
                "mem0_config must be a mem0.configs.base.MemoryConfig or a dict, got "
                f"{type(mem0_config).__name__}"
            )
        qdrant_key: str | None = None
        config, qdrant_key = self._prepare_vector_store(config, embedding_model)
        tokens: list[str] = []
        bridged = chat_model is not None or embedding_model is not None
        if bridged:
            BRIDGE.acquire()
        try:
            config, tokens = bridged_memory_config(
                config,
                chat_model=chat_model,
                embedding_model=embedding_model,
                bridge=BRIDGE,
                timeout=bridge_timeout,
            )
            with warnings.catch_warnings():
                # mem0 asks a shared local client for payload indexes; qdrant warns they
                # have no effect in local mode (harmless, and mem0 ignores the outcome)
                warnings.filterwarnings("ignore", "Payload indexes have no effect", UserWarning)
                memory = mem0.AsyncMemory(config)
            if qdrant_key is not None:
                memory.vector_store.is_local = True  # our shared client is a local one
        except BaseException as exc:
            _cleanup(None, BRIDGE if bridged else None, qdrant_key)
            if isinstance(exc, MemoryStoreError | UserError) or not isinstance(exc, Exception):
                raise
            raise MemoryStoreError(
                redact_text(f"could not build mem0.AsyncMemory: {type(exc).__name__}: {exc}")
            ) from exc
        finally:
            discard_tokens(tokens)
        self.client = memory
        self.hosted = False
        self.owns_client = True
        self.chat_model = chat_model
        self.embedding_model = embedding_model
        models = tuple(m for m in (chat_model, embedding_model) if m is not None)
        BRIDGE.attach(*models)
        _REAPER.start()
        self._finalizer = weakref.finalize(
            self, _REAPER.later, memory, BRIDGE if bridged else None, qdrant_key, models
        )

    def _prepare_vector_store(
        self, config: Any, embedding_model: EmbeddingModelBase | None
    ) -> tuple[Any, str | None]:
        """Check dimensions; share local Qdrant clients. Returns (config, registry key)."""
        vs = config.vector_store
        vs_config = vs.config
        dims_field = getattr(vs_config, "embedding_model_dims", None)
        if (
            embedding_model is not None
            and dims_field is not None
            and dims_field != embedding_model.dimensions
        ):
            raise UserError(
                f"mem0_config.vector_store.config.embedding_model_dims is {dims_field} but "
                f"embedding_model produces {embedding_model.dimensions}-dimensional vectors "
                f"(embedding_model.dimensions={embedding_model.dimensions}); set "
                f"embedding_model_dims={embedding_model.dimensions} in the vector store config "
                "or use an embedding model with matching dimensions"
            )
        if vs.provider != "qdrant":
            return config, None
        key: str | None = None
        client = vs_config.client
        if client is None and vs_config.path and not (vs_config.host or vs_config.url):
            key, client = QDRANT_CLIENTS.acquire(vs_config.path)
            vs_config = vs_config.model_copy(update={"client": client})
            config = config.model_copy(
                update={"vector_store": vs.model_copy(update={"config": vs_config})}
            )
        if client is not None:
            try:
                self._check_collection(client, vs_config, embedding_model)
            except BaseException:
                if key is not None:
                    QDRANT_CLIENTS.release(key)
                raise
        return config, key

    @staticmethod
    def _check_collection(
        client: Any, vs_config: Any, embedding_model: EmbeddingModelBase | None
    ) -> None:
        name = vs_config.collection_name
        expected = (
            embedding_model.dimensions
            if embedding_model is not None
            else vs_config.embedding_model_dims
        )
        if expected is None or not client.collection_exists(name):
            return
        vectors = client.get_collection(name).config.params.vectors
        size = getattr(vectors, "size", None)
        if size is None and isinstance(vectors, dict) and len(vectors) == 1:
            size = next(iter(vectors.values())).size
        if size is not None and size != expected:
            where = (
                vs_config.path or redact_url(vs_config.url) or vs_config.host or "the Qdrant server"
            )
            raise UserError(
                f"the Qdrant collection {name!r} at {where} holds {size}-dimensional vectors "
                f"but the embedding model produces {expected}-dimensional vectors. Fix: use a "
                f"fresh path or collection_name (mem0_config.vector_store.config), delete the "
                f"collection, or use an embedding model with {size} dimensions"
            )

    # ---------------------------------------------------------------- contract
    async def _record(self, request: RecordRequest) -> RecordResult:
        self._check_open()
        messages = self._messages(request.content)
        if not messages:
            return RecordResult()
        infer = self.infer if request.infer is None else request.infer
        kwargs: dict[str, Any] = {**scope_ids(request.scope), "infer": infer}
        if request.metadata:
            kwargs["metadata"] = request.metadata
        try:
            response = await self.client.add(messages, **kwargs)
        except Exception as exc:
            extraction = _find_cause(exc, MemoryExtractionError)
            if extraction is not None:  # our bridge refused a reply mem0 would have dropped
                raise MemoryExtractionError(f"mem0 add failed: {extraction}") from exc
            raise MemoryStoreError(
                redact_text(f"mem0 add failed: {type(exc).__name__}: {exc}")
            ) from exc
        text = "\n".join(m["content"] for m in messages)
        return self._record_result(response, text, request.scope)

    async def _retrieve(self, request: RetrieveRequest) -> list[MemoryItem]:
        self._check_open()
        if not request.query.strip():
            return []
        scope = scope_ids(request.scope)
        filters: dict[str, Any] = (
            {"AND": [{k: v} for k, v in scope.items()]} if self.hosted else scope
        )
        limit, threshold = request.limit, request.threshold
        kwargs: dict[str, Any] = {"top_k": limit, "filters": filters}
        if threshold is not None:
            kwargs["threshold"] = threshold
        try:
            response = await self.client.search(request.query, **kwargs)
        except Exception as exc:
            raise MemoryStoreError(
                redact_text(f"mem0 search failed: {type(exc).__name__}: {exc}")
            ) from exc
        rows = response.get("results", []) if isinstance(response, dict) else response or []
        items = [item_from_row(r) for r in rows if isinstance(r, dict)]
        if threshold is not None:  # the hosted API may not apply it; cheap to enforce
            items = [i for i in items if i.score is None or i.score >= threshold]
        items.sort(key=lambda i: i.score if i.score is not None else float("-inf"), reverse=True)
        return items[:limit]

    async def aclose(self) -> None:
        """Release what this store built (the bridge, the shared Qdrant client, mem0's
        history database). A ``client=`` passed in is left open. Safe to call twice."""
        self.close_sync()

    def close_sync(self) -> None:
        """:meth:`aclose` for synchronous code (nothing in it awaits). Safe to call twice."""
        self._closed = True
        # now, in this thread: the caller may reopen the Qdrant directory next
        found = self._finalizer.detach() if self._finalizer is not None else None
        if found is not None:
            _cleanup(*found[2])

    def _check_open(self) -> None:
        if self._closed and self.owns_client:
            raise MemoryStoreError("this Mem0LongTermMemory was closed")

    # ----------------------------------------------------------------- helpers
    def _messages(self, content: RecordInput) -> list[dict[str, Any]]:
        items: Sequence[str | Msg] = [content] if isinstance(content, str | Msg) else content
        out: list[dict[str, Any]] = []
        for item in items:
            if isinstance(item, str):
                if item.strip():
                    out.append({"role": "user", "content": item})
                continue
            text = item.get_text_content()
            if not text.strip() or item.role == "system":
                continue
            message = {"role": item.role, "content": text}
            if not self.hosted and item.name:
                message["name"] = item.name
            out.append(message)
        return out

    def _record_result(self, response: Any, text: str, scope: MemoryScope) -> RecordResult:
        if isinstance(response, dict) and "results" in response:
            rows = response["results"]
        elif isinstance(response, list):
            rows = response
        elif isinstance(response, dict):
            rows = [response]
        else:
            rows = []
        events: list[RecordEvent] = []
        for row in rows or []:
            if not isinstance(row, dict):
                continue
            kind = _EVENTS.get(str(row.get("event", "")).upper())
            if kind is not None:
                item = item_from_row(row)
                item.user_id = item.user_id or scope.user_id
                item.agent_id = item.agent_id or scope.agent_id
                item.run_id = item.run_id or scope.run_id
                reason = row.get("previous_memory") or row.get("old_memory")
                events.append(RecordEvent(event=kind, item=item, reason=reason))  # type: ignore[arg-type]
            elif str(row.get("status", "")).upper() in ("PENDING", "QUEUED", "SUCCEEDED"):
                # the hosted Platform processes adds asynchronously: accepted, not yet stored
                events.append(
                    RecordEvent(
                        event="add",
                        item=MemoryItem(
                            id=str(row.get("event_id") or row.get("id") or ""),
                            content=text,
                            user_id=scope.user_id,
                            agent_id=scope.agent_id,
                            run_id=scope.run_id,
                            metadata={"status": str(row["status"]).lower()},
                        ),
                        reason=str(row.get("message") or "queued by the mem0 Platform"),
                    )
                )
        return RecordResult(events=events)

    def __repr__(self) -> str:
        kind = "hosted" if self.hosted else "AsyncMemory"
        where = f", path={self.path!r}" if self.path else ""
        return f"Mem0LongTermMemory({kind}{where})"


def _find_cause(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of type ``kind`` in ``exc``'s cause/context chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
