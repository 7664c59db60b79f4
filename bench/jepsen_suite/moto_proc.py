"""moto's S3 server as a process of its own, serving one request at a time.

    python bench/jepsen_suite/moto_proc.py HOST PORT

One at a time because moto checks ``If-Match`` / ``If-None-Match`` and stores the object
in two steps with no lock across them: serving serially makes every conditional PUT
atomic, as S3 makes it (the controller lease and the metadata document depend on it; see
tests/s3_fixtures.py). A process of its own so that the workload's threads and the S3
server do not share one interpreter lock.
"""

from __future__ import annotations

import logging
import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(host, port, app, threaded=False)
    print(f"moto listening on {host}:{port}", flush=True)
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
