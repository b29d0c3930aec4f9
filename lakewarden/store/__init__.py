"""The system database (SQLite or PostgreSQL): ORM rows, store functions that flush and never commit,
migrations, and the drivers' own statements for the hottest paths. The only room that reads or writes it."""
