"""Database models and sessions (SQLAlchemy 2.0) for documents, pages and regions."""
