"""Local databases for development and tests, on mongomock: the embedded client behind `mongomock://`, and
the server-side semantics mongomock leaves out that the engine relies on (`$$NOW`)."""
