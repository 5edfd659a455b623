"""The suite's fork server: processes forked from one that imported torch, soma, pytest and
snakemake once, instead of fresh interpreters that import them again.

A fresh `python -m snakemake` spends about 1.5 CPU-seconds importing snakemake (pandas,
sqlmodel, its scheduler) before it reads a Snakefile, a `soma` that trains about 2 importing
torch, and the suite runs each hundreds of times; a mutant's run (tests/test_mutations.py)
would import torch, soma and pytest's plugins again, about 300 times. One multiprocessing
forkserver per pytest process (started on first use, its environment the process's own, with
one torch thread) imports them once, and each process is forked from it: still a process of
its own, with its own pid, session, working directory, environment and exit status, which
imports only what it reads after the fork (the Snakefile and what it imports, a test module).
The server is one per process because multiprocessing keeps one; its preload is this
module's, whoever starts it.

A forked snakemake's workflow jobs are forked too: before it reads the Snakefile it forks a
job server of its own (its image still the server's), and snakemake runs tests/forked_job.py
where it would run `python SCRIPT` for a job; that client has the job server fork the job with
the client's arguments, environment, folder and standard streams, and ends as the job ends.
"""

from __future__ import annotations

import atexit
import gc
import importlib.util
import json
import multiprocessing
import os
import runpy
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import forkserver
from pathlib import Path

import forked_job


def _plugins() -> list[str]:
    """The modules of the installed pytest plugins (entry point group `pytest11`), which a
    mutant's run's pytest.main would import again: libraries that never import soma, so a
    mutant applied after the fork patches what it always did."""
    from importlib.metadata import entry_points

    return sorted({point.value.split(":")[0] for point in entry_points(group="pytest11")})


# hypothesis: its plugin imports it when pytest starts, whether or not a test uses it
PRELOAD = ["torch", "numpy", "safetensors", "soma", "soma.cli", "pytest", "hypothesis"]
PRELOAD += _plugins()
# what `python -m snakemake` imports before and as it reads the Snakefile: libraries that read
# no environment as they are imported (its executor plugins, which may, it loads as it runs;
# soma's modules the Snakefile imports it imports after the fork, with the mutant's run's)
PRELOAD += ["snakemake.cli", "snakemake.api", "snakemake.workflow", "snakemake.dag"]
PRELOAD += ["jsonschema", "boto3", "docutils", "pygments", "nbformat", "PIL", "jinja2"]
PRELOAD += ["yte", "dpath", "smart_open", "requests"]


def context() -> multiprocessing.context.BaseContext:
    """The forkserver context, its server running: started here, with one torch thread (as
    in every test process), when this process has none yet."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        if threads is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = threads
    return context


def serves(env: dict | None = None) -> bool:
    """Whether a test's process is forked from the server: not where the test's environment
    changes how the interpreter starts (`added_path` is None: a PYTHONPATH whose
    sitecustomize applies the mutant or fakes Slurm's commands), nor in a mutant's run (a
    fork itself: a server of its own would cost more than the few processes its catchers
    start). An environment that only adds module folders (the fixture tasks) is forked."""
    if os.environ.get("SOMA_MUTANT"):
        return False
    return env is None or added_path(env) is not None


# what the interpreter runs as it starts when it is found on the path
_STARTUP = ("sitecustomize.py", "usercustomize.py", "sitecustomize", "usercustomize")


def added_path(env: dict[str, str]) -> list[str] | None:
    """The folders `env`'s PYTHONPATH puts first on a process's path (a forked one puts them
    before the server's path), when that is all that its PYTHON* variables change and none
    of those folders holds what an interpreter runs as it starts (sitecustomize,
    usercustomize, a .pth file): a fresh interpreter then starts as the server did. None
    where they change more: a process that only a fresh interpreter starts as it should."""
    here = {k: v for k, v in os.environ.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}
    there = {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}
    if here != there:
        return None
    folders = [f for f in env.get("PYTHONPATH", "").split(os.pathsep) if f]
    for folder in folders:
        if os.path.isdir(folder) and any(
            name in _STARTUP or name.endswith(".pth") for name in os.listdir(folder)
        ):
            return None
    return folders


def _exit(code: object) -> None:
    """End a forked process as an interpreter ends: its non-daemon threads joined, its atexit
    functions run, its output flushed, then its exit status (SystemExit's meaning of `code`)."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


# what `python -m` runs for each command a test forks
_MODULES = {"snakemake": "snakemake", "soma": "soma.cli"}

# the workflow's jobs: each a `python SCRIPT` that snakemake starts (tests/forked_job.py)
_JOB_CLIENT = Path(forked_job.__file__)


def _serve_jobs(folder: str) -> None:
    """Before a forked snakemake starts: a job server forked from it while it is still the
    fork server's preloaded image (no thread, no Snakefile read), in its session and process
    group (a kill of the group ends the jobs too), and `sys.executable` pointed at
    tests/forked_job.py, which snakemake runs for each `script:` job as it would the
    interpreter. The server ends when snakemake does (the pipe it holds closes)."""
    address = os.path.join(folder, "jobs")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    alive, held = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
        os.close(held)
        _job_server(listener, alive)
    listener.close()
    os.close(alive)
    os.environ[forked_job.ADDRESS] = address
    client = shlex.quote(str(_JOB_CLIENT))
    sys.executable = f"{shlex.quote(sys.executable)} -I -S {client}"


def _job_server(listener: socket.socket, alive: int) -> None:
    """The job server's loop: for each job asked for, a waiter forked (which forks the job);
    the waiters are reaped by the kernel. It ends when snakemake's end closes `alive`."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C reaches the jobs, not their server
    while True:
        ready, _, _ = select.select([listener, alive], [], [])
        if alive in ready:
            os._exit(0)
        connection, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            os.close(alive)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            _wait_job(connection)
        connection.close()


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """The job's request (argv, env, cwd: JSON after its length) and its standard streams."""
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 3)
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        more = connection.recv(1 << 16)
        if not more:
            os._exit(1)  # its client is gone: no job to run
        data += more
    return json.loads(data[4:]), fds


def _wait_job(connection: socket.socket) -> None:
    """The waiter: fork the job, tell the client its pid and then its wait status; kill the
    job if the client goes first (snakemake killed it)."""
    request, fds = _receive(connection)
    pid = os.fork()
    if pid == 0:
        connection.close()
        _job(request, fds)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    ended = os.pidfd_open(pid)
    ready, _, _ = select.select([connection, ended], [], [])
    if ended not in ready:  # the client closed (nothing else comes from it): it is gone
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    try:
        connection.sendall(f"{status}\n".encode())
    except OSError:
        pass  # the client is gone
    os._exit(0)


def _job(request: dict, fds: list[int]) -> None:
    """In the job: its client's standard streams, environment and folder, then its script as
    `python SCRIPT ARGS` runs it (`__main__`, its folder first on the path)."""
    gc.freeze()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    del os.environ[forked_job.ADDRESS]
    os.chdir(request["cwd"])
    _exit(_python(list(request["argv"])))


def _python(argv: list[str]) -> object:
    """What `python ARGV` runs, in this process: `SCRIPT ARGS` (its folder first on the path)
    or `-m MODULE ARGS` (the working folder first: a `run:` job, which snakemake spawns as
    `python -m snakemake ...`), as `__main__`; its exit code as SystemExit has it (1, its
    traceback printed, for an exception)."""
    try:
        if argv[0] == "-m":
            sys.argv = [importlib.util.find_spec(argv[1]).origin, *argv[2:]]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as done:
        return done.code
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1


def _umask() -> int:
    """This process's umask, read without changing it (os.umask sets one to read one)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    raise RuntimeError("/proc/self/status has no Umask line")


def _command(
    name: str,
    args: list[str],
    cwd: str,
    environ: dict[str, str],
    umask: int,
    stdout: str,
    stderr: str,
) -> None:
    """In the forked process: a session of its own (killed as a group, with what it starts),
    output to `stdout` and `stderr` (one file for both when they are the same), the caller's
    working directory, environment and umask, then the command line of `name`: `snakemake`
    or `soma`, as `python -m` runs them, or `python`'s (`args`: a script and its arguments)."""
    gc.freeze()  # the server's imports: nothing for the collector to walk
    os.setsid()
    os.umask(umask)
    for fd, path in ((1, stdout), (2, stderr)):
        if fd == 2 and stderr == stdout:
            os.dup2(1, 2)  # one file description: both in the order written
        else:
            opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    sys.path[:0] = added_path(environ) or []
    if name == "python":
        _exit(_python(args))
    sys.argv = [
        importlib.util.find_spec(f"{_MODULES[name]}.__main__").origin,
        *args,
    ]  # as `-m` has it
    try:
        if name == "snakemake":
            from snakemake.cli import main

            options = {arg.split("=")[0] for arg in args}
            if not {"--executor", "-e", "--profile", "--workflow-profile"} & options:
                _serve_jobs(os.path.dirname(stdout))
            main()
            code: object = 0
        else:
            from soma.cli import main

            code = main()
    except SystemExit as done:
        code = done.code
    _exit(code)


class Forked:
    """A forked `python -m NAME ARGS` (NAME: snakemake or soma; or `python ARGS`, NAME
    python) in `cwd` with this process's environment (or `env`: one that `serves`, its
    PYTHONPATH's folders first on the path) and umask (or `umask`), as much of
    `subprocess.Popen` as the tests use: `pid`, `args`, `returncode`, `poll()`, `wait()`,
    `kill()` (its whole process group) and `communicate()` (its stdout and stderr once it
    ends, as text; stderr `apart`, or in stdout in the order written). Its output goes to
    files, so nothing blocks on a pipe nobody reads yet."""

    def __init__(
        self,
        name: str,
        args: list[str],
        cwd: Path | str | None = None,
        *,
        apart: bool = True,
        umask: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        environ = dict(os.environ) if env is None else dict(env)
        if added_path(environ) is None:
            raise ValueError(f"a fresh interpreter, not a forked one, starts {name} in that env")
        self._folder = tempfile.mkdtemp(prefix=f"{name}-")
        self._out = os.path.join(self._folder, "out")
        self._err = os.path.join(self._folder, "err") if apart else self._out
        self._apart = apart
        self._said: tuple[str, str] | None = None
        self._lock = threading.Lock()  # one thread at a time asks multiprocessing
        module = [] if name == "python" else ["-m", _MODULES[name]]
        self.args = [sys.executable, *module, *args]
        self.returncode: int | None = None
        where = str(cwd) if cwd is not None else os.getcwd()
        mask = _umask() if umask is None else umask
        self._process = context().Process(
            target=_command,
            args=(name, list(args), where, environ, mask, self._out, self._err),
            name=name,
        )
        self._process.start()
        self.pid = self._process.pid

    def _wait(self, timeout: float) -> int | None:
        with self._lock:
            if self.returncode is None:
                self._process.join(timeout)
                self.returncode = self._process.exitcode
        return self.returncode

    def poll(self) -> int | None:
        return self._wait(0)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._wait(0.1) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def kill(self) -> None:
        kill_group(self)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        if self._said is None:
            out, err = (
                Path(f).read_text(errors="replace") if os.path.exists(f) else ""
                for f in (self._out, self._err)
            )
            self._said = (out, err if self._apart else "")
            shutil.rmtree(self._folder, ignore_errors=True)
        return self._said


def kill_group(process: Forked | subprocess.Popen) -> None:
    """SIGKILL to a running process's whole process group (one it started in a session of
    its own, with what it started); nothing once it has ended."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended in between


def _forked(
    name: str,
    args: list[str],
    cwd: Path | str | None,
    timeout: float,
    *,
    apart: bool,
    umask: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`Forked` to its end (`finished`)."""
    process = Forked(name, args, cwd, apart=apart, umask=umask, env=env)
    return finished(process, name, timeout)


def finished(
    process: Forked | subprocess.Popen, name: str, timeout: float
) -> subprocess.CompletedProcess:
    """A started process (forked, or a text-mode Popen in a session of its own) to its end,
    its output captured; killed as a whole process group, failing the test with what it
    said, if it outlives `timeout`."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        out, err = process.communicate()
        said = out[-3000:] + (err or "")[-3000:]
        raise AssertionError(f"{name} outlived {timeout}s:\n{said}") from None
    return subprocess.CompletedProcess(process.args, process.returncode, out, err or "")


def snakemake(
    args: list[str],
    *,
    cwd: Path | str | None,
    timeout: float,
    umask: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`python -m snakemake ARGS`, forked: its output (stdout and stderr, in the order
    written) is the result's stdout; `umask` and `env` as `subprocess.run`'s (the caller's
    if None)."""
    return _forked("snakemake", args, cwd, timeout, apart=False, umask=umask, env=env)


def soma(
    args: list[str], *, cwd: Path | str | None, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python -m soma.cli ARGS`, forked: stdout and stderr apart, as `subprocess.run` with
    `capture_output` has them; `env` as its (the caller's if None)."""
    return _forked("soma", args, cwd, timeout, apart=True, env=env)
