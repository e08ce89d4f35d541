"""Single sign-on for administrators: OpenID Connect authorization code with PKCE S256.

    client = SsoClient(config.sso, store, clock)     # client.py: the flow (Authlib, joserfc)
    actors = SsoActors(store)                         # actors.py: a session's actor
    router = sso_router(client, actors, access, pages)  # endpoints.py

Modules: ``provider`` (discovery, keys), ``client`` (the flow and the ID token),
``roles`` (the person's name, claims → bindings), ``actors`` (claims' bindings plus
the store's, re-read on every request), ``endpoints`` (the routes).

(Nothing is re-exported here: ``fairgate.admin.dashboard.access`` imports
``actors`` and ``endpoints`` imports the dashboard, so this package stays empty.)
"""
