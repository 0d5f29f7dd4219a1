"""The KServe v2 gRPC frontend (inference.GRPCInferenceService): the server (``grpc_server``), the
conversion of its protobuf messages to and from the core's requests (``grpc_codec``) and its
options (``options``)."""
