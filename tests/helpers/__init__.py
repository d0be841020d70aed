"""Shared test helpers: fixtures built or fetched once and cached outside the repository."""
