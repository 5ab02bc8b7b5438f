"""harel-dev, the development distribution of harel: local databases for development and tests, on
mongomock. The embedded client behind `mongomock://` (`embedded.py`), the MongoDB-compatible development
server that `harel dev` runs (`python -m harel_dev.server`, see `server.py`), and the server-side semantics
mongomock leaves out or gets wrong that the engine relies on (`$$NOW` in `now.py`, expression corrections in
`expressions.py`). Importing it changes nothing in mongomock: the corrections are applied when an embedded
client or a server's engine is built (`mongomock_patches.py`)."""
