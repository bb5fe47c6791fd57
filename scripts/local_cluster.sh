#!/usr/bin/env bash
# Runs a whole job on this machine as separate processes: one scheduler, S
# servers and W workers, all on 127.0.0.1 with ephemeral ports.
#
#   scripts/local_cluster.sh [--servers S] [--workers W] [--out DIR] [--secure] [--consistency MODE]
#                            [--scheduler-flag F]... [--server-flag F]...
#                            -- WORKER_BINARY [WORKER_FLAGS...]
#
# The supervision is scripts/launch/local_cluster.py (its --help says the
# rest), on the launchers' one process supervisor, scripts/launch/procs.py.
exec /usr/bin/python3 "$(dirname "$0")/launch/local_cluster.py" "$@"
