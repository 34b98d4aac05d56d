"""The PostgreSQL backend (extra ``goondan[postgres]``): the only package that imports psycopg."""
