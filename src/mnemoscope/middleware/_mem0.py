"""``Mem0Middleware``: long-term memory powered by mem0 (``pip install 'mnemoscope[mem0]'``).

Example (the seed's quick start, with our own models)::

    mw = Mem0Middleware(
        user_id="alice",
        chat_model=mem0_chat_model,          # NOT the agent's model instance
        embedding_model=embedding_model,     # dimensions must match the store
        mode="both",
    )
    agent = Agent(
        name="assistant",
        system_prompt="You are a helpful assistant.",
        model=agent_chat_model,
        toolkit=Toolkit(tools=await mw.list_tools()),
        middlewares=[mw],
    )
    await agent.reply(UserMsg("alice", "Remember that I prefer dark-mode charts."))
    await mw.aclose()

It is :class:`~mnemoscope.middleware.LongTermMemoryMiddleware` bound to
:class:`~mnemoscope.memory.Mem0LongTermMemory`; see those for modes, tools, write-back,
construction paths and failure reporting.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from mnemoscope.errors import UserError
from mnemoscope.memory import Mem0LongTermMemory
from mnemoscope.middleware._long_term import LongTermMemoryMiddleware

if TYPE_CHECKING:
    from mnemoscope.embedding import EmbeddingModelBase
    from mnemoscope.middleware._view import AgentView
    from mnemoscope.model import ChatModelBase


@dataclass(eq=False, repr=False)
class Mem0Middleware(LongTermMemoryMiddleware):
    """A drop-in mem0 long-term memory.

    Args:
        user_id: mem0 namespace for the user's memories.
        mode: ``"static_control"``, ``"agent_control"`` or ``"both"`` (default).
        agent_id: optional finer namespace.
        top_k: memories per static search; default ``limit`` of ``search_memory``.
        threshold: minimum similarity score; ``None`` lets mem0 decide.
        scope_search_by_agent: filter searches by ``agent_id`` too (``False``: a user's
            memories are shared across agents).
        await_write: await the post-reply write, or run it in a tracked background task
            (flushed by :meth:`aclose`).
        chat_model: the model mem0 extracts facts with (a separate instance from the
            agent's; checked when the agent is built).
        embedding_model: mem0's embedder; its dimensions must match the vector store.
        mem0_config: a ``mem0.configs.base.MemoryConfig`` (or dict) to start from; only the
            llm/embedder slots are replaced by the models given.
        client: a pre-built ``mem0.AsyncMemory``/``mem0.AsyncMemoryClient``; takes
            precedence over the three arguments above and is never closed by us. After
            construction, the client in use (given or built).
        path: local Qdrant directory when building from models alone (default
            ``$MNEMOSCOPE_MEM0_PATH``, else mem0's ``/tmp/qdrant``).
        run_id, search_timeout, write_timeout, tool_infer, name: see
            :class:`LongTermMemoryMiddleware`.
    """

    # the settings shared with LongTermMemoryMiddleware (user_id, mode, agent_id, run_id,
    # top_k, threshold, ...) are inherited: declared once, there. These are mem0's own.
    store: Mem0LongTermMemory = field(init=False)
    _: KW_ONLY
    name: str = "mem0"
    close_store: bool = field(default=True, init=False)  # the store is built here
    chat_model: ChatModelBase | None = None
    embedding_model: EmbeddingModelBase | None = None
    mem0_config: Any = None
    client: Any = None
    """The ``mem0.AsyncMemory`` / ``AsyncMemoryClient`` in use (given, or built here)."""
    path: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.user_id, str) or not self.user_id.strip():
            raise UserError(f"user_id must be a non-empty string, got {self.user_id!r}")
        store = Mem0LongTermMemory(
            self.client,
            chat_model=self.chat_model,
            embedding_model=self.embedding_model,
            mem0_config=self.mem0_config,
            path=self.path,
        )
        self.store = store
        try:
            super().__post_init__()
        except BaseException:
            store.close_sync()  # release the bridge and the Qdrant client
            raise
        self.client = store.client

    def setup(self, agent: AgentView) -> None:
        """Refuse an agent that shares its model instance (or its HTTP client) with mem0."""
        mine = self.store.chat_model
        if mine is not None and _same_model(agent.model, mine):
            raise UserError(
                f"Mem0Middleware(user_id={self.user_id!r}) and agent {agent.name!r} share one "
                "chat-model instance. mem0 calls its model from a separate bridge event loop, "
                "so the two would share one async HTTP client across two event loops "
                "(intermittent 'bound to a different event loop' / connection errors). Build "
                "a second model object for chat_model= (same provider, name, endpoint and "
                "key are fine)."
            )
        super().setup(agent)


def _same_model(a: object, b: object) -> bool:
    if a is b:
        return True
    client_a = getattr(a, "_client", None)
    return client_a is not None and client_a is getattr(b, "_client", None)
