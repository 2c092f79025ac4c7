#!/usr/bin/env python3
"""An S3-compatible server on loopback for eddy's tests: moto's S3, served
one request at a time.

moto's own `moto_server` is threaded, and its conditional PUT checks for the
key and then writes it without a lock, so two racing `If-None-Match: *`
creates can both win (seen once in 700 rounds of 16 racers). Served by one
thread, each request runs whole before the next: conditional creates are
atomic, which eddy's start-up probe and tests rely on.

Usage: s3_server.py HOST PORT   (install: pip install 'moto[server]')
"""
import sys

from moto.moto_server.threaded_moto_server import MotoRequestHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, app, threaded=False, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
