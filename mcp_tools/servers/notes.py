"""A stateful notes MCP server backed by SQLite: search, list, read, create, append, delete.

Its state is per MCP session by default, so it shows (and tests) rollout isolation. Mistakes the model
can fix (an unknown note id, an empty title) are MCP tool errors whose message says what to do.
"""

from __future__ import annotations

import json
import sqlite3
from collections import OrderedDict
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from mcp_tools import _compat
from mcp_tools.servers._runner import base_parser, serve

__all__ = ["NoteError", "NotesStore", "StoreRegistry", "build_server", "load_seed", "main"]

#: Per-session stores kept at once over HTTP (least recently used dropped first).
MAX_SESSIONS = 512
#: Notes listed by the ``notes://index`` resource.
MAX_INDEX_NOTES = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
"""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_seed(path: Path | None = None) -> list[dict[str, Any]]:
    """The seed notes: *path* (JSON ``{"notes": [...]}``) or the bundled ``data/notes_seed.json``."""
    if path is None:
        text = (
            resources.files("mcp_tools.servers").joinpath("data/notes_seed.json").read_text(encoding="utf-8")
        )
    else:
        text = Path(path).read_text(encoding="utf-8")
    data = json.loads(text)
    notes = data.get("notes") if isinstance(data, dict) else None
    if not isinstance(notes, list):
        raise ValueError(f"seed file {path or 'notes_seed.json'} must hold {{'notes': [...]}}")  # noqa: TRY004 - bad file content
    return notes


class NoteError(ValueError):
    """A request the store cannot satisfy; the message tells the model what to do instead."""


class NotesStore:
    """The notes of one database (one SQLite connection). Pure storage: no MCP here."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.db = connection
        self.db.row_factory = sqlite3.Row
        self.db.executescript(_SCHEMA)

    @classmethod
    def from_seed(cls, notes: list[dict[str, Any]]) -> NotesStore:
        """A fresh in-memory store holding *notes*."""
        store = cls(sqlite3.connect(":memory:", check_same_thread=False))
        store.seed(notes)
        return store

    @classmethod
    def open_file(cls, path: Path, seed: list[dict[str, Any]]) -> NotesStore:
        """The store in the SQLite file *path*, seeded with *seed* if it holds no notes yet."""
        path.parent.mkdir(parents=True, exist_ok=True)
        store = cls(sqlite3.connect(str(path), check_same_thread=False))
        if store.db.execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 0:
            store.seed(seed)
        return store

    @classmethod
    def copy_of_file(cls, path: Path) -> NotesStore:
        """An in-memory copy of the SQLite file *path* (which is only read)."""
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        target = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            source.backup(target)
        finally:
            source.close()
        return cls(target)

    def seed(self, notes: list[dict[str, Any]]) -> None:
        """Insert seed notes (``title``, ``body``, ``tags``, optional ``created_at``)."""
        with self.db:
            for note in notes:
                created = str(note.get("created_at") or _now())
                self.db.execute(
                    "INSERT INTO notes (title, body, tags, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                    (note["title"], note.get("body", ""), ",".join(note.get("tags", [])), created, created),
                )

    def _get(self, note_id: int) -> sqlite3.Row:
        row = self.db.execute("SELECT * FROM notes WHERE id = ?", (note_id,)).fetchone()
        if row is None:
            raise NoteError(
                f"there is no note with id {note_id}; use list_notes or search_notes to find note ids"
            )
        return row

    @staticmethod
    def _line(row: sqlite3.Row) -> str:
        tags = f" [{row['tags']}]" if row["tags"] else ""
        return f"#{row['id']} {row['title']}{tags} (updated {row['updated_at']})"

    def list_notes(self, tag: str | None = None, limit: int = 20) -> str:
        """One line per note, newest first, optionally only those with *tag*."""
        rows = self.db.execute("SELECT * FROM notes ORDER BY updated_at DESC, id DESC").fetchall()
        if tag:
            rows = [r for r in rows if tag.strip().lower() in r["tags"].lower().split(",")]
        rows = rows[: max(1, limit)]
        if not rows:
            return f"no notes tagged {tag!r}" if tag else "there are no notes"
        return "\n".join(self._line(r) for r in rows)

    def search(self, query: str, limit: int = 5) -> str:
        """Notes whose title, body or tags contain every word of *query* (case-insensitive)."""
        words = [w.lower() for w in query.split() if w.strip()]
        if not words:
            raise NoteError("the search query is empty; pass one or more words to look for")
        hits = []
        for row in self.db.execute("SELECT * FROM notes ORDER BY updated_at DESC, id DESC"):
            haystack = f"{row['title']} {row['body']} {row['tags']}".lower()
            if all(w in haystack for w in words):
                snippet = row["body"][:120] + ("..." if len(row["body"]) > 120 else "")
                hits.append(f"{self._line(row)}\n    {snippet}")
        if not hits:
            return f"no notes match {query!r}"
        return "\n".join(hits[: max(1, limit)])

    def read(self, note_id: int) -> str:
        """The whole note."""
        row = self._get(note_id)
        return f"{self._line(row)}\ncreated {row['created_at']}\n\n{row['body']}"

    def create(self, title: str, body: str, tags: list[str] | None = None) -> str:
        """Add a note; returns its id."""
        if not title.strip():
            raise NoteError("a note needs a non-empty title")
        now = _now()
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO notes (title, body, tags, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                (title.strip(), body, ",".join(t.strip() for t in tags or [] if t.strip()), now, now),
            )
        return f"created note #{cursor.lastrowid}"

    def append(self, note_id: int, text: str) -> str:
        """Append *text* as a new paragraph of the note."""
        row = self._get(note_id)
        body = f"{row['body']}\n{text}" if row["body"] else text
        with self.db:
            self.db.execute("UPDATE notes SET body = ?, updated_at = ? WHERE id = ?", (body, _now(), note_id))
        return f"appended to note #{note_id}"

    def delete(self, note_id: int) -> str:
        """Delete the note."""
        row = self._get(note_id)
        with self.db:
            self.db.execute("DELETE FROM notes WHERE id = ?", (note_id,))
        return f"deleted note #{note_id} ({row['title']})"


class StoreRegistry:
    """Which store a request uses: one shared store, or one per MCP session.

    * default: every MCP session gets its own database, a fresh copy of the seed
      (``data/notes_seed.json``, or ``--seed FILE``). Over stdio that is one copy per
      server process; over HTTP one per MCP session. Rollouts never see each other's
      writes, and each starts from the same notes.
    * ``--db PATH``: all sessions share the SQLite file at PATH (created and seeded
      when missing), and changes persist after the server stops.
    * ``--db PATH --seed-copy``: PATH is a template: every session gets its own copy
      of it, and PATH itself is never written.
    """

    def __init__(self, *, db: Path | None, seed_copy: bool, seed: list[dict[str, Any]]) -> None:
        self._db = db
        self._seed = seed
        self._shared = NotesStore.open_file(db, seed) if db is not None and not seed_copy else None
        if db is not None and seed_copy and not db.exists():
            NotesStore.open_file(db, seed).db.close()  # create the template once
        self._per_session: OrderedDict[str, NotesStore] = OrderedDict()

    def _fresh(self) -> NotesStore:
        if self._db is not None:
            return NotesStore.copy_of_file(self._db)
        return NotesStore.from_seed(self._seed)

    def starting_index(self) -> str:
        """The notes a new session starts with (one line each: id, title, tags)."""
        if self._shared is not None:
            return self._shared.list_notes(None, MAX_INDEX_NOTES)
        store = self._fresh()
        try:
            return store.list_notes(None, MAX_INDEX_NOTES)
        finally:
            store.db.close()

    def store_for(self, session_key: str) -> NotesStore:
        """The store of the MCP session *session_key* (see ``_compat.session_key``)."""
        if self._shared is not None:
            return self._shared
        store = self._per_session.get(session_key)
        if store is None:
            store = self._fresh()
            self._per_session[session_key] = store
            if (
                len(self._per_session) > MAX_SESSIONS
            ):  # ended HTTP sessions are not announced: drop the oldest
                self._per_session.popitem(last=False)[1].db.close()
        else:
            self._per_session.move_to_end(session_key)
        return store


def build_server(registry: StoreRegistry) -> Any:
    """The notes server with its tools registered, storing through *registry*."""
    server = _compat.create_server(
        "notes",
        "A personal notes store. Find notes with search_notes or list_notes, read one with read_note, "
        "change them with create_note, append_to_note and delete_note. Note ids look like #12.",
    )

    def run(ctx: Any, action: Any) -> str:
        try:
            return action(registry.store_for(_compat.session_key(ctx)))
        except NoteError as exc:
            raise _compat.ServerToolError(str(exc)) from exc

    @server.resource(
        "notes://index",
        name="notes-index",
        description="The notes every session starts with: id, title and tags, newest first.",
        mime_type="text/plain",
    )
    def notes_index() -> str:
        return registry.starting_index()

    @server.tool()
    async def search_notes(query: str, ctx: _compat.ServerContext, limit: int = 5) -> str:
        """Find notes containing every word of the query (title, body or tags). Returns ids, titles and snippets."""
        return run(ctx, lambda s: s.search(query, limit))

    @server.tool()
    async def list_notes(ctx: _compat.ServerContext, tag: str | None = None, limit: int = 20) -> str:
        """List notes, newest first, optionally only those with a tag (e.g. "work")."""
        return run(ctx, lambda s: s.list_notes(tag, limit))

    @server.tool()
    async def read_note(note_id: int, ctx: _compat.ServerContext) -> str:
        """Read a whole note by its id."""
        return run(ctx, lambda s: s.read(note_id))

    @server.tool()
    async def create_note(
        title: str, body: str, ctx: _compat.ServerContext, tags: list[str] | None = None
    ) -> str:
        """Create a note with a title, a body and optional tags. Returns the new note's id."""
        return run(ctx, lambda s: s.create(title, body, tags))

    @server.tool()
    async def append_to_note(note_id: int, text: str, ctx: _compat.ServerContext) -> str:
        """Append text as a new line at the end of an existing note."""
        return run(ctx, lambda s: s.append(note_id, text))

    @server.tool()
    async def delete_note(note_id: int, ctx: _compat.ServerContext) -> str:
        """Delete a note by its id."""
        return run(ctx, lambda s: s.delete(note_id))

    return server


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Run: ``python -m mcp_tools.servers.notes [--db PATH [--seed-copy]] [--transport http --port 0]``.
    """
    parser = base_parser("Notes MCP server (stateful, SQLite).")
    parser.add_argument("--db", type=Path, help="shared SQLite file (created and seeded if missing)")
    parser.add_argument(
        "--seed-copy", action="store_true", help="with --db: give every session its own copy of that file"
    )
    parser.add_argument(
        "--seed", type=Path, help="seed notes JSON (default: the bundled data/notes_seed.json)"
    )

    def build(args: Any) -> Any:
        if args.seed_copy and args.db is None:
            parser.error(
                "--seed-copy needs --db PATH (without --db every session already gets a fresh seed copy)"
            )
        return build_server(StoreRegistry(db=args.db, seed_copy=args.seed_copy, seed=load_seed(args.seed)))

    return serve(build, parser, argv)


if __name__ == "__main__":
    raise SystemExit(main())
