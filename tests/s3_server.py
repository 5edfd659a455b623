"""moto's S3 server for tests/test_store_s3.py where SeaweedFS's `weed` is not installed:

    python tests/s3_server.py <port>

served on 127.0.0.1 one request at a time. moto's conditional PUT (If-None-Match) is a
check then a write with no lock between them, so its own threaded server
(`python -m moto.server`) can let two racers both create a key; served serially, every
request is atomic. The test module's race check (8 racers, 20 trials) is what tells a server
that is not.
"""

from __future__ import annotations

import os
import signal
import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple


def main(port: int) -> None:
    os.environ["MOTO_PORT"] = str(port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple("127.0.0.1", port, DomainDispatcherApplication(create_backend_app), threaded=False)


if __name__ == "__main__":
    main(int(sys.argv[1]))
