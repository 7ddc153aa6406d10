"""API keys: the stores (SQLite, PostgreSQL) and the middleware that checks them."""
