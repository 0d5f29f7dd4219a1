"""Why an endpoint cannot be reached, in words a user can act on.

gRPC says ``UNAVAILABLE`` with a C-core debug string ("failed to connect to all addresses; ...
Socket closed") for every way a connection can fail, and aiohttp a disconnect: neither says
that the server speaks TLS while the URL says ``grpc://``. When an endpoint is unreachable, the
remote model asks :func:`explain`, which looks at the endpoint the way its client would, one
step at a time, each told apart by an exception type or a protocol's own bytes, never by an
error's text:

1. TCP: refused (nothing listens there), no answer in time, the host name does not resolve;
2. for ``grpcs://`` and ``https://``: a TLS handshake with the binding's CA, client certificate
   and key, offering ALPN ``h2`` and ``http/1.1``: the certificate is not trusted
   (``ssl.SSLCertVerificationError``: a wrong CA, or a name the certificate does not hold), the
   handshake fails (OpenSSL's reason code: ``WRONG_VERSION_NUMBER`` is a plaintext server, an
   alert a refused client certificate), or it works and ALPN says what the server speaks
   (``h2`` only: a gRPC port);
3. for ``grpc://`` and ``http://``: whether the server speaks TLS (a handshake without
   verification succeeds: the URL needs ``grpcs://`` or ``https://``), else the first bytes it
   answers an HTTP/1.1 request with: ``HTTP/1.x`` (an HTTP port, wrong for ``grpc://``) or an
   HTTP/2 frame (a gRPC port, wrong for ``http://``).

It answers "" when it finds nothing wrong (then the client's own message stands). Every step is
bounded by ``timeout``; it runs on the remote model's event loop, only for an endpoint that is
down (its probes are backed off), never on a frame's path. Hand-written because no library
diagnoses a protocol mismatch; the protocols themselves stay the libraries' (ssl, asyncio).
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from .config import EndpointAddress, RemoteConfig

HTTP2_FRAME_TYPES = range(0x0, 0xA)  # DATA .. CONTINUATION (RFC 9113, section 6)


async def explain(address: EndpointAddress, settings: RemoteConfig, timeout: float) -> str:
    """What is wrong with reaching ``address`` as its URL says, or ""."""
    where = address.target
    scheme = address.url.split("://", 1)[0]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(address.host, address.port), timeout
        )
    except ConnectionRefusedError:
        return f"connection refused: nothing listens on {where}"
    except socket.gaierror:
        return f"the host name '{address.host}' does not resolve"
    except (asyncio.TimeoutError, TimeoutError):
        return f"no TCP connection to {where} within {timeout:g} s (host down, or a firewall)"
    except OSError as exc:
        return f"cannot connect to {where}: {exc.strerror or type(exc).__name__}"
    _close(writer)
    if address.tls:
        return await _explain_tls(address, settings, scheme, timeout)
    return await _explain_plain(address, scheme, timeout)


async def _explain_tls(
    address: EndpointAddress, settings: RemoteConfig, scheme: str, timeout: float
) -> str:
    where = address.target
    context = ssl.create_default_context(cafile=settings.tls_ca_file or None)
    if settings.tls_cert_file:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    context.set_alpn_protocols(["h2", "http/1.1"])
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(
                address.host, address.port, ssl=context, server_hostname=address.host
            ),
            timeout,
        )
    except ssl.SSLCertVerificationError as exc:
        ca = f"tls_ca_file {settings.tls_ca_file}" if settings.tls_ca_file else "the system's CAs"
        return (
            f"the TLS certificate of {where} is not trusted: {exc.verify_message} (is it "
            f"signed by {ca}, for the name '{address.host}'?)"
        )
    except ssl.SSLError as exc:
        if exc.reason == "WRONG_VERSION_NUMBER":
            plain = "grpc://" if address.protocol == "grpc" else "http://"
            return (
                f"TLS handshake with {where} failed: the server does not speak TLS "
                f"(a plaintext port: use {plain})"
            )
        if exc.reason and "ALERT" in exc.reason:
            hint = (
                "; it may require a client certificate (tls_cert_file, tls_key_file)"
                if not settings.tls_cert_file
                else "; it may not accept tls_cert_file (signed by another CA?)"
            )
            return f"the server at {where} refused the TLS handshake ({exc.reason}){hint}"
        return f"TLS handshake with {where} failed ({exc.reason or type(exc).__name__})"
    except (asyncio.TimeoutError, TimeoutError):
        return f"no TLS handshake with {where} within {timeout:g} s"
    except (ConnectionError, OSError) as exc:
        return (
            f"the server at {where} closed the connection during the TLS handshake "
            f"({type(exc).__name__}): it may not speak TLS"
        )
    protocol = writer.get_extra_info("ssl_object").selected_alpn_protocol()
    _close(writer)
    if address.protocol == "http" and protocol == "h2":
        return f"the server at {where} speaks HTTP/2 only (a gRPC port?): use grpcs://"
    if address.protocol == "grpc" and protocol == "http/1.1":
        return f"the server at {where} speaks HTTP/1.1 (an HTTP port?): use https://"
    return ""


async def _explain_plain(address: EndpointAddress, scheme: str, timeout: float) -> str:
    where = address.target
    secure = "grpcs://" if address.protocol == "grpc" else "https://"
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    speaks_tls = (
        f"the server at {where} speaks TLS (gRPC says 'Socket closed' for this) but "
        f"the URL is {scheme}://: use {secure}"
    )
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(
                address.host, address.port, ssl=context, server_hostname=address.host
            ),
            timeout,
        )
        _close(writer)
        return speaks_tls
    except ssl.SSLError as exc:
        if exc.reason and "ALERT" in exc.reason:  # it answered in TLS, refusing us
            return speaks_tls
    except (ConnectionError, OSError, asyncio.TimeoutError, TimeoutError):
        pass  # not TLS: what does it answer?
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(address.host, address.port), timeout
        )
    except (OSError, asyncio.TimeoutError, TimeoutError):
        return ""
    try:
        writer.write(f"GET /v2/health/live HTTP/1.1\r\nHost: {where}\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.read(16), timeout)
    except (OSError, asyncio.TimeoutError, TimeoutError):
        return ""
    finally:
        _close(writer)
    if head.startswith(b"HTTP/1.") and address.protocol == "grpc":
        return f"the server at {where} speaks HTTP/1.1 (an HTTP port?), not gRPC: use http://"
    if (
        len(head) >= 9
        and head[3] in HTTP2_FRAME_TYPES
        and not head.startswith(b"HTTP")
        and address.protocol == "http"
    ):
        return f"the server at {where} speaks HTTP/2 only (a gRPC port?), not HTTP/1.1: use grpc://"
    return ""


def _close(writer: asyncio.StreamWriter) -> None:
    try:
        writer.close()
    except Exception:  # already closed by the peer
        pass
