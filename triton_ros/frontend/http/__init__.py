"""The KServe v2 HTTP/REST frontend: the server (``http_server``), the conversion of its JSON and
binary bodies to and from the core's requests (``http_codec``), the aiohttp transport with its
limits (``http_transport``) and its options (``options``)."""
