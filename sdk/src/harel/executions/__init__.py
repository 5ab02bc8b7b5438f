"""The `executions` document, as pure functions: every field (`fields`, which says who writes each), the
values builders take and parsers return (`records`), every read (`queries`), every write (`writes`, and
`commits` for the steps' own update), the indexes (`indexes`) and what replies mean (`replies`).

MongoStore, AsyncMongoStore and the two MongoTransports build a command here, send it, and parse the reply
here: they hold no knowledge of the document of their own, so the twins cannot drift apart.
"""
