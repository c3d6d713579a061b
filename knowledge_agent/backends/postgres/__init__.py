"""The PostgreSQL backend: one database holds a knowledge base (items, chunks, postings and
their statistics, vectors); psycopg is imported only when it is used."""
