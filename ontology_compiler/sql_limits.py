"""The default bounds of a user's query (``run_sql``, ``hrrbert sql``), in a module without DuckDB so the
command's ``--help`` can show them without loading it: seconds, DuckDB ``memory_limit``, DuckDB threads."""

SQL_DEFAULT_TIMEOUT = 60.0
SQL_DEFAULT_MEMORY_LIMIT = "2GB"
SQL_DEFAULT_THREADS = 2
