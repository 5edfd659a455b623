"""`python SCRIPT`, as snakemake starts each workflow job, for a snakemake forked by
tests/forking.py: this small interpreter (stdlib only, started isolated) asks that snakemake's
job server to fork the job from a process that imported torch, soma and snakemake once, hands
it its standard streams, environment, working directory and arguments, and ends as the job
ends: its exit status, or the signal that killed it. A signal sent to this process (snakemake
cancelling a job) is passed on to the job; if this process is killed outright, the job's
waiter sees the connection close and kills the job."""

import json
import os
import signal
import socket
import struct
import sys

ADDRESS = "SOMA_TESTS_JOB_SERVER"


def main() -> None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(os.environ[ADDRESS])
    request = json.dumps(
        {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}
    ).encode()
    socket.send_fds(connection, [struct.pack("!I", len(request)) + request], [0, 1, 2])
    answers = connection.makefile("rb")
    pid = int(answers.readline())

    def pass_on(number: int, _frame: object) -> None:
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            pass  # it ended in between

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(number, pass_on)
    status = answers.readline()
    if not status:
        sys.exit("soma tests: the job server closed before the job ended")
    code = os.waitstatus_to_exitcode(int(status))
    if code < 0:  # killed by a signal: so is this process, as a shell would see it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
