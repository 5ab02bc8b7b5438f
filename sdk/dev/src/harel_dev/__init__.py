"""Local databases for development and tests, on mongomock: the embedded client behind `mongomock://`,
the MongoDB-compatible development server (`python -m harel.local.server`, see `server.py`), and the
server-side semantics mongomock leaves out or gets wrong that the engine relies on (`$$NOW` in `now.py`,
expression corrections in `expressions.py`)."""
