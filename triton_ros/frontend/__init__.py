"""Network frontends over the shared core, one package per protocol (KServe v2 gRPC and HTTP/REST,
Kafka) and the metrics endpoint, each converting and delegating."""
