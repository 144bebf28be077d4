"""moto's S3 server, as ``python -m moto.server`` runs it, with one answer put in AWS's words.

moto (5.2) answers CompleteMultipartUpload with a ``<CompleteMultipartUploadResponse>`` root;
AWS S3 says ``<CompleteMultipartUploadResult>``, and the AWS SDK inside pyarrow (the one Ray's
``--storage s3://`` writes through) treats any other root as an error embedded in a 200 and
gives up ("AWS Error INTERNAL_FAILURE during CompleteMultipartUpload"). boto3 reads either.
Run: ``python -m tests.team.s3_server HOST PORT``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

WRONG, RIGHT = b"CompleteMultipartUploadResponse", b"CompleteMultipartUploadResult"


def aws_words(app: Callable) -> Callable:
    """WSGI middleware: the completion's root element renamed, everything else passed through."""

    def wrapped(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        completing = environ.get("REQUEST_METHOD") == "POST" and \
            "uploadId=" in environ.get("QUERY_STRING", "")
        if not completing:
            return app(environ, start_response)
        held: dict[str, Any] = {}

        def hold(status: str, headers: list, exc_info: Any = None) -> Callable:
            held["status"], held["headers"] = status, headers
            return lambda data: None

        body = b"".join(app(environ, hold)).replace(WRONG, RIGHT)
        headers = [(k, str(len(body)) if k.lower() == "content-length" else v)
                   for k, v in held["headers"]]
        start_response(held["status"], headers)
        return [body]

    return wrapped


def main(host: str, port: int) -> None:
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import run_simple

    run_simple(host, port, aws_words(DomainDispatcherApplication(create_backend_app)),
               threaded=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
