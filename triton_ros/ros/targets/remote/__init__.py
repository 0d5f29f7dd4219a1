"""A model served by remote KServe v2 endpoints (a binding's ``server_urls``), one concept a
module: the settings (config.py), what went wrong (errors.py), one client class per protocol
(clients.py), the endpoint pool (pool.py), shared-memory slots (shared_memory.py), planning from
the remote's configuration (planning.py), the model target itself (model.py) and per-endpoint
diagnostics (diagnostics.py)."""
