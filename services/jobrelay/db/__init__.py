"""The PostgreSQL adapter: tables, named statements, and the store that runs them."""
