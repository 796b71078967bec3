"""This process's name among the workers that share one database: `WORKER`, `hostname:pid:random`.

Run records and webhook deliveries name the worker that holds them. The host name and process id say where to look;
the random part keeps two processes apart that share both: two containers on a host's network (each Parley as PID
1 under the host's name) or a container restarted in the same Kubernetes pod.
"""

from __future__ import annotations

import os
import secrets
import socket

WORKER = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
