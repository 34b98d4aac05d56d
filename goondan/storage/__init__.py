"""Storage backends behind one contract (:mod:`goondan.storage.contract`).

The JSONL state root (:mod:`goondan.storage.jsonl` over ``goondan/workspace/``) is the default
and the reference; PostgreSQL (``goondan/storage/postgres/``) is an optional extra whose driver
is imported only there, never by ``import goondan``."""
