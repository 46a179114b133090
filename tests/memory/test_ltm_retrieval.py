"""LocalLongTermMemory retrieval behaviour on small synthetic conversations: BM25F with
per-field length normalisation, speaker names as entities, "when" questions, named periods,
the in-process lexical index kept in step with writes, and its Porter stemmer."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from mnemoscope.memory._local_ltm import LocalLongTermMemory
from mnemoscope.memory._ltm_search import DEFAULT_SETTINGS, RetrievalSettings
from mnemoscope.memory._ltm_text import (
    FAR_CONTEXT,
    index_terms,
    names_time,
    neighbour_context,
    time_query,
)
from mnemoscope.message import UserMsg
from mnemoscope.testing import HashEmbeddingModel
from mnemoscope.text import stem

FTS5 = RetrievalSettings(lexical_engine="fts5")  # what the store ranked by before


def contents(items) -> list[str]:
    return [i.content for i in items]


async def test_a_when_question_ranks_the_turn_that_names_a_time_first() -> None:
    async with LocalLongTermMemory(":memory:") as store:
        await store.record("The pottery class was fun.", user_id="u")
        await store.record("I went to a pottery class yesterday.", user_id="u")
        await store.record("Dinner with my sister on Friday.", user_id="u")
        hits = await store.retrieve("When did she go to the pottery class?", user_id="u")
        assert hits[0].content == "I went to a pottery class yesterday."
        # the same words without "when": the shorter row keeps its place
        hits = await store.retrieve("Did she enjoy the pottery class?", user_id="u")
        assert hits[0].content == "The pottery class was fun."


async def test_a_speaker_the_question_names_is_an_entity_not_a_search_word() -> None:
    # "Caroline" is in every row (a speaker, a "Caroline: ..." context line, a word), so
    # BM25 gave the name no weight and ranked Melanie's shorter turn above what Caroline
    # painted; as an entity, rows Caroline said are boosted instead
    store = LocalLongTermMemory(":memory:", embedding_model=HashEmbeddingModel(64))
    async with store:
        await store.record(
            [
                UserMsg("Melanie", "Hey Caroline, how was the weekend with the kids and the dog?"),
                UserMsg("Caroline", "I painted a big sunset over the lake at the cabin."),
                UserMsg("Melanie", "Cool."),
                UserMsg("Caroline", "Yes."),
                UserMsg("Melanie", "I painted a horse."),
                UserMsg("Caroline", "Nice."),
            ],
            user_id="u",
        )
        for mode in ("lexical", "hybrid"):
            hits = await store.retrieve("What did Caroline paint?", user_id="u", mode=mode)
            assert hits[0].content.startswith("I painted a big sunset"), mode
            hits = await store.retrieve("What did Melanie paint?", user_id="u", mode=mode)
            assert hits[0].content == "I painted a horse.", mode


async def test_a_question_made_only_of_a_name_still_finds_that_speaker() -> None:
    async with LocalLongTermMemory(":memory:") as store:
        await store.record(
            [UserMsg("Jon", "Hello there."), UserMsg("Gina", "Hi! Long day at work.")],
            user_id="u",
        )
        hits = await store.retrieve("Gina?", user_id="u")
        assert [h.metadata["speaker"] for h in hits][:1] == ["Gina"]


async def test_a_long_neighbouring_context_does_not_bury_a_short_answer() -> None:
    # FTS5's bm25() normalises by the whole row: the short answer "Yes, the violin." came
    # with a long neighbouring turn and fell below an equally matching longer row
    long_turn = "I have been thinking about music lessons " + "and so many other things " * 12
    store = LocalLongTermMemory(":memory:", context_window=1)
    async with store:
        await store.record([UserMsg("A", long_turn), UserMsg("B", "Yes, the violin.")], user_id="u")
        await store.record("The violin case is in the car with the other stuff.", user_id="u")
        hits = await store.retrieve("violin", user_id="u")
        assert hits[0].content == "Yes, the violin."
        store.retrieval = FTS5
        hits = await store.retrieve("violin", user_id="u")
        assert hits[0].content != "Yes, the violin."  # the old ranking, for contrast


FLOOR_TALK = [
    UserMsg("Jon", "How is the new studio going?"),
    UserMsg("Gina", "Busy! I finally ordered the dance floor for the studio."),
    UserMsg("Jon", "Did you get the sprung wooden floor you wanted?"),
    UserMsg("Gina", "Yes."),
    UserMsg("Jon", "A wooden floor is great for dancers."),
    UserMsg("Gina", "The dancers love it already."),
]
FLOOR_QUESTION = "What kind of floor did Gina order for her studio?"


async def test_on_defaults_a_short_reply_does_not_outrank_the_turn_it_answers() -> None:
    # with two neighbours on each side at full weight, "Yes." gathered "floor" from three
    # turns around it and ranked above the question it answers; the turns beyond the next
    # one now count half, and two neighbours are the default
    async with LocalLongTermMemory(":memory:") as store:
        assert store.context_window == 2
        await store.record(FLOOR_TALK, user_id="u")
        ranked = contents(await store.retrieve(FLOOR_QUESTION, user_id="u", mode="lexical"))
        assert ranked.index("Did you get the sprung wooden floor you wanted?") < ranked.index(
            "Yes."
        )
        store.retrieval = replace(DEFAULT_SETTINGS, far_context_weight=1.0)  # as before
        ranked = contents(await store.retrieve(FLOOR_QUESTION, user_id="u", mode="lexical"))
        assert ranked.index("Yes.") < ranked.index(
            "Did you get the sprung wooden floor you wanted?"
        )


def test_neighbour_context_puts_the_next_turns_first_and_the_rest_after_the_separator() -> None:
    lines = ["a", "b", None, "d", "e", "f"]
    assert neighbour_context(lines, 3, 2) == f"e{FAR_CONTEXT}b\nf"  # None is left out
    assert neighbour_context(lines, 1, 2) == f"a{FAR_CONTEXT}d"
    assert neighbour_context(lines, 4, 1) == "d\nf"  # one neighbour: as stores held it
    assert neighbour_context(lines, 4, 0) == ""


async def test_a_store_written_before_the_separator_searches_as_before(tmp_path: Path) -> None:
    # rows stored with two neighbours before the separator existed hold them on plain
    # lines: all of them are near, at full weight, which is how they were ranked then
    path = tmp_path / "old.db"
    async with LocalLongTermMemory(path) as store:
        await store.record(FLOOR_TALK, user_id="u")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE ltm_memories SET context = replace(context, ?, ?)", [FAR_CONTEXT, "\n"]
        )
    conn.close()
    async with LocalLongTermMemory(path) as store:
        for far in (0.0, 0.5, 1.0):
            store.retrieval = replace(DEFAULT_SETTINGS, far_context_weight=far)
            ranked = contents(await store.retrieve(FLOOR_QUESTION, user_id="u", mode="lexical"))
            assert ranked.index("Yes.") < ranked.index(
                "Did you get the sprung wooden floor you wanted?"
            ), far


async def test_a_named_period_favours_rows_that_occurred_in_it() -> None:
    async with LocalLongTermMemory(":memory:") as store:
        await store.record(
            "Went camping by the river.", user_id="u", occurred_at=datetime(2023, 7, 2)
        )
        await store.record(
            "Went camping in the mountains.", user_id="u", occurred_at=datetime(2023, 5, 20)
        )
        hits = await store.retrieve("Where did she go camping in May 2023?", user_id="u")
        assert hits[0].content == "Went camping in the mountains."
        hits = await store.retrieve("Where did she go camping in July?", user_id="u")
        assert hits[0].content == "Went camping by the river."


async def test_boosts_off_rank_by_bm25f_alone() -> None:
    async with LocalLongTermMemory(":memory:") as store:
        store.retrieval = replace(DEFAULT_SETTINGS, when_boost=0.0)
        await store.record("The pottery class was fun.", user_id="u")
        await store.record("I went to a pottery class yesterday.", user_id="u")
        hits = await store.retrieve("When did she go to the pottery class?", user_id="u")
        assert hits[0].content == "The pottery class was fun."


async def test_the_lexical_index_follows_adds_updates_deletes_and_supersedes() -> None:
    async with LocalLongTermMemory(":memory:") as store:
        first = (await store.record("Bought a red kayak.", user_id="u")).added[0]
        assert contents(await store.retrieve("kayak", user_id="u")) == ["Bought a red kayak."]
        await store.record(["Sold the kayak paddle.", "Ate ramen."], user_id="u")  # appended
        assert len(await store.retrieve("kayak", user_id="u")) == 2
        await store.update(first.id, "Bought a blue canoe.")
        assert contents(await store.retrieve("kayak", user_id="u")) == ["Sold the kayak paddle."]
        assert contents(await store.retrieve("canoe", user_id="u")) == ["Bought a blue canoe."]
        await store.delete(first.id)
        assert await store.retrieve("canoe", user_id="u") == []
        for i in range(12):  # more appended segments than are kept apart
            await store.record(f"Kayak trip number {i}.", user_id="u")
        assert len(await store.retrieve("kayak trip", user_id="u", limit=20)) == 13
        assert await store.retrieve("kayak", user_id="other") == []


async def test_rows_another_connection_writes_are_found(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    async with LocalLongTermMemory(path) as reader, LocalLongTermMemory(path) as writer:
        await writer.record("Planted tomatoes.", user_id="u")
        assert contents(await reader.retrieve("tomatoes", user_id="u")) == ["Planted tomatoes."]
        await writer.record("Tomatoes got blight.", user_id="u")
        assert len(await reader.retrieve("tomatoes", user_id="u")) == 2
        await writer.erase_user("u")
        assert await reader.retrieve("tomatoes", user_id="u") == []
        await reader.retrieve("tomatoes", user_id="u")
        await writer.erase_user("u")
        await writer.record("Tomato soup for lunch.", user_id="u")  # history cut, then added
        hits = await reader.retrieve("tomatoes", user_id="u")
        assert contents(hits) == ["Tomato soup for lunch."]


async def test_an_index_kept_up_to_date_ranks_as_one_built_afresh(tmp_path: Path) -> None:
    path = tmp_path / "ltm.db"
    words = ["kayak", "canoe", "paddle", "river", "lake", "boat", "trip", "camp", "fish", "rain"]
    queries = ["kayak river", "canoe trip", "fish in the rain", "boat camp lake"]
    async with LocalLongTermMemory(path) as store:
        ids = []
        for i in range(40):
            text = " ".join(words[(i * k) % len(words)] for k in (1, 3, 7)) + f" day {i}"
            ids.append((await store.record(text, user_id="u")).added[0].id)
            if i % 9 == 8:
                await store.retrieve("kayak", user_id="u")  # index, then change it
                await store.update(ids[i - 3], f"rain on the lake again {i}")
                await store.delete(ids[i - 5])
        live = {q: contents(await store.retrieve(q, user_id="u", limit=20)) for q in queries}
    async with LocalLongTermMemory(path) as fresh:
        for q in queries:
            assert contents(await fresh.retrieve(q, user_id="u", limit=20)) == live[q], q


async def test_scope_status_and_expiry_apply_to_the_lexical_index() -> None:
    async with LocalLongTermMemory(":memory:") as store:
        await store.record("Jazz night on Friday.", user_id="u", agent_id="a", run_id="r1")
        await store.record("Jazz records for sale.", user_id="u", agent_id="b", run_id="r2")
        await store.record("Jazz expired note.", user_id="u", ttl=0.001)
        await asyncio.sleep(0.01)  # past its expiry however fast the next calls run
        hits = await store.retrieve("jazz", user_id="u", agent_id="a")
        assert contents(hits) == ["Jazz night on Friday."]
        hits = await store.retrieve("jazz", user_id="u", run_id="r2")
        assert contents(hits) == ["Jazz records for sale."]
        assert len(await store.retrieve("jazz", user_id="u")) == 2


def test_time_query_reads_when_questions_and_named_periods() -> None:
    assert time_query("When did Jon open his studio?").asks_when
    assert time_query("What year did they move?").asks_when
    assert not time_query("What did Jon open?").asks_when
    q = time_query("What did Gina do in May 2023?")
    assert (q.year, q.month) == (2023, 5)
    assert time_query("What may Gina do next?").month is None  # the verb, not the month
    assert time_query("Did she travel in Aug?").month == 8
    assert names_time("I went there yesterday") and names_time("back in 2019")
    assert not names_time("I love painting landscapes")


_WORD_TEXT = """
    caresses ponies ties caress cats feed agreed plastered bled motoring sing conflated
    troubled sized hopping tanned falling hissing fizzed failing filing happy sky
    relational conditional rational valenci hesitanci digitizer conformabli radicalli
    differentli vileli analogousli vietnamization predication operator feudalism
    decisiveness hopefulness callousness formaliti sensitiviti sensibiliti triplicate
    formative formalize electriciti electrical hopeful goodness revival allowance
    inference airliner gyroscopic adjustable defensible irritant replacement adjustment
    dependent adoption homologou communism activate angulariti homologous effective
    bowdlerize probate rate cease controlling rolling generalizations oscillators
    running painted paintings yesterday adoption agencies
"""
WORDS = _WORD_TEXT.split()


def test_the_stemmer_matches_fts5_porter() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5 (x, tokenize = 'porter unicode61')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab (f, 'instance')")
    conn.executemany("INSERT INTO f (rowid, x) VALUES (?, ?)", enumerate(WORDS))
    fts = {WORDS[doc]: term for term, doc in conn.execute("SELECT term, doc FROM v")}
    assert {w: stem(w) for w in WORDS} == fts


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("Café in Zürich!", ["cafe", "zurich"]),
        ("She was painting the paintings", ["paint", "paint"]),
        ("the and of", []),
    ],
)
def test_index_terms_fold_stem_and_drop_stopwords(text: str, terms: list[str]) -> None:
    assert index_terms(text) == terms
