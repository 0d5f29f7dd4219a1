"""Helpers of the remote-model tests: certificates, and proxies in front of triton-ros-server.

- :func:`make_certs` writes a CA, a server certificate for 127.0.0.1/localhost, a client
  certificate, and a second, unrelated CA (the "wrong certificate" cases), with the openssl CLI.
- :class:`TcpProxy`: a TCP proxy on 127.0.0.1, optionally terminating TLS (ALPN h2 and
  http/1.1, so gRPC and HTTP both pass; optionally requiring a client certificate) and
  optionally delaying every chunk from the server (a slow remote, whatever the protocol).
- :class:`GrpcProxy`: a gRPC server forwarding every method, as bytes, to a plain triton-ros-server;
  with TLS (optionally mutual) and Triton's restricted-protocol check (a header key and value;
  a call without it fails with UNAVAILABLE and Triton's message).

triton-ros-server has no TLS or restricted protocols of its own (yet); these stand in for the
TLS termination and header check that tritonserver does.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import threading
from concurrent import futures
from pathlib import Path

from server_process import free_port


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(dest: Path) -> dict[str, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other_ca"):
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.pem",
            "-subj",
            f"/CN=triton_ros test {ca}",
            cwd=dest,
        )
    (dest / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who, ext in (("server", ["-extfile", "server.ext"]), ("client", [])):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{who}.key",
            "-out",
            f"{who}.csr",
            "-subj",
            f"/CN={who}",
            cwd=dest,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            f"{who}.pem",
            *ext,
            cwd=dest,
        )
    # a client certificate signed by the wrong CA
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "rogue.key",
        "-out",
        "rogue.csr",
        "-subj",
        "/CN=rogue",
        cwd=dest,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "rogue.csr",
        "-CA",
        "other_ca.pem",
        "-CAkey",
        "other_ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "rogue.pem",
        cwd=dest,
    )
    return {
        name: dest / name
        for name in (
            "ca.pem",
            "other_ca.pem",
            "server.pem",
            "server.key",
            "client.pem",
            "client.key",
            "rogue.pem",
            "rogue.key",
        )
    }


class TcpProxy:
    """127.0.0.1:port -> backend port; TLS termination and a response delay are optional."""

    def __init__(
        self,
        backend_port: int,
        *,
        certs: dict[str, Path] | None = None,
        require_client_cert: bool = False,
        delay_s: float = 0.0,
    ) -> None:
        self.backend_port = backend_port
        self.port = free_port()
        self.delay_s = delay_s
        self._ssl = None
        if certs is not None:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(certs["server.pem"], certs["server.key"])
            ctx.set_alpn_protocols(["h2", "http/1.1"])
            if require_client_cert:
                ctx.verify_mode = ssl.CERT_REQUIRED
                ctx.load_verify_locations(certs["ca.pem"])
            self._ssl = ctx
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port, ssl=self._ssl)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader, writer) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.backend_port)
        except OSError:
            writer.close()
            return

        async def pipe(src, dst, delay: bool) -> None:
            # A delayed direction is a link with latency: each chunk leaves delay_s after it came.
            queue: asyncio.Queue = asyncio.Queue()

            async def deliver() -> None:
                while True:
                    due, data = await queue.get()
                    if data is None:
                        break
                    wait = due - self._loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    dst.write(data)
                    await dst.drain()

            sender = asyncio.ensure_future(deliver())
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    await queue.put((self._loop.time() + (self.delay_s if delay else 0.0), data))
                await queue.put((0.0, None))
                await sender
            except Exception:
                sender.cancel()
            finally:
                try:
                    dst.close()
                except Exception:
                    pass

        try:
            await asyncio.gather(
                pipe(reader, up_writer, False),
                pipe(up_reader, writer, True),
                return_exceptions=True,
            )
        except asyncio.CancelledError:  # the proxy is closing
            pass

    def close(self) -> None:
        async def stop():
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(stop(), self._loop)
        self._thread.join(10)


class GrpcProxy:
    """A gRPC server forwarding every method to a plain gRPC backend, with TLS and a header
    check."""

    def __init__(
        self,
        backend: str,
        *,
        certs: dict[str, Path] | None = None,
        require_client_cert: bool = False,
        header: tuple[str, str] | None = None,
        unimplemented: tuple[str, ...] = (),
    ) -> None:
        """``unimplemented``: method names (e.g. "ModelConfig") answered UNIMPLEMENTED, like a
        KServe v2 server without Triton's extensions."""
        import grpc

        self.port = free_port()
        self.rejected = 0
        self._channel = grpc.insecure_channel(
            backend,
            options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
        )
        channel = self._channel
        proxy = self

        class Forward(grpc.GenericRpcHandler):
            def service(self, details):
                method = details.method

                def unary(request: bytes, context):
                    if method.rsplit("/", 1)[-1] in unimplemented:
                        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} not supported")
                    if header is not None:
                        sent = dict(context.invocation_metadata()).get(header[0])
                        if sent != header[1]:
                            proxy.rejected += 1
                            context.abort(
                                grpc.StatusCode.UNAVAILABLE,
                                f"This protocol is restricted, expecting header '{header[0]}'",
                            )
                    try:
                        return channel.unary_unary(method)(request, timeout=30)
                    except grpc.RpcError as exc:
                        context.abort(exc.code(), exc.details())

                return grpc.unary_unary_rpc_method_handler(unary)

        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=16),
            options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
        )
        self._server.add_generic_rpc_handlers((Forward(),))
        address = f"127.0.0.1:{self.port}"
        if certs is not None:
            creds = grpc.ssl_server_credentials(
                [(certs["server.key"].read_bytes(), certs["server.pem"].read_bytes())],
                root_certificates=certs["ca.pem"].read_bytes() if require_client_cert else None,
                require_client_auth=require_client_cert,
            )
            self._server.add_secure_port(address, creds)
        else:
            self._server.add_insecure_port(address)
        self._server.start()

    def close(self) -> None:
        self._server.stop(grace=None)
        self._channel.close()
