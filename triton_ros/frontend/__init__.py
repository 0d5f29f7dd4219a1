"""Network frontends over the shared core: KServe v2 gRPC (and HTTP), each converting and delegating."""
