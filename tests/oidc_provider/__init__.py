"""A small OpenID provider run as a real process by the identity tests (see server.py)."""
