"""``r2med.http.download``: a GET with r2med's retry rules, against a loopback server only."""

from __future__ import annotations

import http.server
import threading

import pytest

from r2med.errors import MissingResourceError, ProviderError, UsageError
from r2med.http.download import download
from r2med.http.retry import RetryPolicy

FAST = RetryPolicy(max_retries=2, base_delay=0.001, max_delay=0.002)


@pytest.fixture
def server():
    """Answers /flaky with 503 once then the body, /gone with 404, /bad with 400, /ok with the body."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            if self.path == "/flaky" and seen.count("/flaky") == 1:
                status, body = 503, b'{"error": {"message": "busy"}}'
            elif self.path in ("/ok", "/flaky"):
                status, body = 200, b"q1 Q0 d1 1 1.0 x\n"
            else:
                status, body = (404, b"not here") if self.path == "/gone" else (400, b"bad request")
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def test_a_503_is_retried_then_the_body_returned(server):
    base, seen = server
    assert download(f"{base}/ok", policy=FAST) == b"q1 Q0 d1 1 1.0 x\n"
    assert download(f"{base}/flaky", policy=FAST, sleep=lambda s: None) == b"q1 Q0 d1 1 1.0 x\n"
    assert seen == ["/ok", "/flaky", "/flaky"]


def test_errors_name_the_url_and_the_fix(server):
    base, seen = server
    with pytest.raises(MissingResourceError, match=r"GET http://127\.0\.0\.1:\d+/gone: no file there \(HTTP 404\)"):
        download(f"{base}/gone", policy=FAST)
    with pytest.raises(ProviderError, match="failed with HTTP 400: bad request"):
        download(f"{base}/bad", policy=FAST)
    assert seen == ["/gone", "/bad"]  # neither is retried
    with pytest.raises(UsageError, match="is not an http"):
        download("ftp://example.org/x")
    with pytest.raises(ProviderError, match="more than the 4 accepted"):
        download(f"{base}/ok", policy=FAST, max_bytes=4)


def test_an_unreachable_server_is_a_missing_resource_at_once():
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    waits: list[float] = []
    # nothing ever answered there: a refused connection is not retried (a server that is not started does not start)
    with pytest.raises(MissingResourceError, match=r"cannot reach http://127\.0\.0\.1:\d+/x: connection refused "
                                                   r"\(is the server started\?\); check the address"):
        download(f"http://127.0.0.1:{port}/x", policy=FAST, sleep=waits.append)
    assert waits == []
