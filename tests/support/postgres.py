"""A real, throwaway PostgreSQL for the tests (issue 36 item 5): never a mock, never SQLite.

Fixtures (registered for the whole suite by ``pytest_plugins`` in tests/conftest.py):

* ``postgres_cluster`` (session): one cluster per test process — one per xdist worker under
  ``pytest -n 2`` — started on first use only, so the tests that do not ask for PostgreSQL never
  start it, never import psycopg and never need the server installed.
* ``postgres_url``: a fresh, empty database for one test (``CREATE DATABASE`` from a template,
  a few tens of ms), dropped after it; the URL carries a random password, as a deployment's would.

How the cluster runs:

* Debian's server binaries (``/usr/lib/postgresql/<newest>/bin``, or ``GOONDAN_TEST_PG_BIN``);
  ``make test`` installs the ``postgresql`` package when they are missing.
* ``initdb`` refuses to run as root, so under root the data directory (a fresh ``/tmp`` dir
  owned by ``postgres``) is made and served as the ``postgres`` user.
* The server listens on 127.0.0.1 only, on a free port, with no Unix socket; password (scram)
  authentication with a random password.
* ``postgres`` runs as a direct child of the test process (not daemonised by ``pg_ctl``), with
  ``setpriv --pdeathsig KILL``: when the test process dies, however it dies, the kernel kills the
  postmaster and its backends exit with it — no server survives a crashed or killed test run.
  At the end of the session it gets a fast shutdown (SIGINT) and its directory is removed; the
  directory of a test process that was killed is removed by the next cluster start
  (:func:`remove_stale_directories`, by the owner pid written in it).
* ``fsync=off`` (and ``full_page_writes=off``): fsync only protects against a crash of the
  operating system, which no test simulates; a killed client or a terminated backend loses
  nothing with it off, because every flushed commit still reaches the kernel before it is
  acknowledged (``synchronous_commit`` stays on; the running turn's writes turn it off, as on
  any server). It keeps ``CREATE DATABASE`` and commits cheap.

A cluster that cannot start FAILS the tests that need it (with the server's log), it never
skips them: a PostgreSQL test that silently does not run is worse than a red one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "PostgresCluster", "find_bin_dir", "password_of", "remove_stale_directories", "start_cluster",
]

START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
_TEMPLATE = "goondan_template"


def find_bin_dir() -> Path | None:
    """The directory of ``initdb`` and ``postgres`` (newest Debian major), if installed."""
    override = os.environ.get("GOONDAN_TEST_PG_BIN")
    if override:
        return Path(override)
    root = Path("/usr/lib/postgresql")
    majors = sorted(
        (p for p in root.glob("*") if (p / "bin" / "postgres").exists()),
        key=lambda p: int(p.name) if p.name.isdigit() else 0,
    )
    return majors[-1] / "bin" if majors else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresCluster:
    """One running throwaway cluster (see the module docstring)."""

    directory: Path
    port: int
    password: str
    process: subprocess.Popen[bytes]
    user: str = "postgres"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def connect(self, database: str = "postgres") -> Any:
        import psycopg

        return psycopg.connect(self.url(database), autocommit=True, connect_timeout=5)

    def create_database(self) -> str:
        """A fresh database (from the session's template); returns its name."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {_TEMPLATE}')
        return name

    def drop_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL after STOP_TIMEOUT; the directory is removed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)
        shutil.rmtree(self.directory, ignore_errors=True)


def _as_server_user(argv: list[str]) -> list[str]:
    """The server dies with the test process (``--pdeathsig``, set after the user change, which
    would clear it); under root it runs as the ``postgres`` user (it refuses root)."""
    user = ["--reuid=postgres", "--regid=postgres", "--init-groups"] if os.geteuid() == 0 else []
    return ["setpriv", *user, "--pdeathsig=KILL", "--", *argv]


_PREFIX = "goondan-pg-"
_OWNER_FILE = "owner.pid"  # the test process that made the directory


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_directories() -> None:
    """Remove the cluster directories (~60 MB each) of test processes that died without
    cleaning up (SIGKILL): their server died with them (parent-death signal), the files stay."""
    for directory in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        try:
            owner = int((directory / _OWNER_FILE).read_text(encoding="ascii"))
        except (OSError, ValueError):
            continue  # being made right now, or not ours: leave it
        if not _pid_alive(owner):
            shutil.rmtree(directory, ignore_errors=True)


def _prepare_directory() -> Path:
    directory = Path(tempfile.mkdtemp(prefix=_PREFIX))
    (directory / _OWNER_FILE).write_text(str(os.getpid()), encoding="ascii")
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    return directory


def _initdb(bin_dir: Path, directory: Path, password: str) -> None:
    pwfile = directory / "pwfile"
    pwfile.write_text(password + "\n", encoding="ascii")
    if os.geteuid() == 0:
        shutil.chown(pwfile, "postgres", "postgres")
    pwfile.chmod(0o600)
    argv = [
        str(bin_dir / "initdb"), "-D", str(directory / "data"), "-U", "postgres",
        "--auth=scram-sha-256", f"--pwfile={pwfile}", "--encoding=UTF8", "--locale=C",
        "--no-sync",
    ]
    if os.geteuid() == 0:  # runuser: a one-shot command; it needs no parent-death signal
        argv = ["runuser", "-u", "postgres", "--", *argv]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    pwfile.unlink()
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode("utf-8", errors="replace")
        raise RuntimeError(f"initdb failed ({done.returncode}):\n{output[-3000:]}")


def _spawn(bin_dir: Path, directory: Path, port: int, *, fsync: bool) -> subprocess.Popen[bytes]:
    settings = {
        "listen_addresses": "127.0.0.1",
        "port": str(port),
        "unix_socket_directories": "",
        "fsync": "on" if fsync else "off",
        "full_page_writes": "on" if fsync else "off",
        "max_connections": "100",  # the server's default, stated: the tests count on it
        "shared_buffers": "32MB",
        "logging_collector": "off",
    }
    argv = [str(bin_dir / "postgres"), "-D", str(directory / "data")]
    for key, value in settings.items():
        argv += ["-c", f"{key}={value}"]
    log = (directory / "server.log").open("ab")
    try:
        return subprocess.Popen(
            _as_server_user(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,  # a Ctrl-C in the terminal reaches pytest, not the server
        )
    finally:
        log.close()


def _wait_ready(cluster: PostgresCluster) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if cluster.process.poll() is not None:
            raise RuntimeError(
                f"postgres exited ({cluster.process.returncode}):\n{cluster.log_tail()}"
            )
        try:
            with cluster.connect():
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"postgres not ready after {START_TIMEOUT:.0f} s:\n{cluster.log_tail()}"
                ) from None
            time.sleep(0.05)  # polling a condition with a deadline


def start_cluster(*, fsync: bool = False) -> PostgresCluster:
    """initdb + start + a template database; raises ``RuntimeError`` saying why it could not.

    ``fsync=True`` is for benchmarks (scripts/bench_store.py): commits pay a real flush.
    """
    bin_dir = find_bin_dir()
    if bin_dir is None or not (bin_dir / "postgres").exists():
        where = bin_dir / "postgres" if bin_dir else "/usr/lib/postgresql/*/bin/postgres"
        raise RuntimeError(
            f"the PostgreSQL server is not installed (no {where}); `make test` installs it "
            "(apt-get install postgresql), or set GOONDAN_TEST_PG_BIN to its bin directory"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise RuntimeError(
            "psycopg is not installed: pip install -e '.[dev]' (or 'pygoondan[postgres]')"
        ) from None
    remove_stale_directories()
    directory = _prepare_directory()
    password = secrets.token_urlsafe(18)
    try:
        _initdb(bin_dir, directory, password)
        last_error: RuntimeError | None = None
        for _attempt in range(3):  # another process may take the free port first
            port = _free_port()
            process = _spawn(bin_dir, directory, port, fsync=fsync)
            cluster = PostgresCluster(directory, port, password, process)
            try:
                _wait_ready(cluster)
            except RuntimeError as exc:
                last_error = exc
                with contextlib.suppress(OSError):
                    cluster.process.kill()
                cluster.process.wait()
                if "could not bind" not in str(exc) and "in use" not in str(exc):
                    break
                continue
            with cluster.connect() as conn:
                conn.execute(f"CREATE DATABASE {_TEMPLATE}")
            return cluster
        assert last_error is not None
        raise last_error
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def password_of(url: str) -> str:
    """The password in a ``postgresql://user:password@host/db`` URL (what no output may show)."""
    return url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """This test process's PostgreSQL cluster, started on first use, stopped at session end."""
    try:
        cluster = start_cluster()
    except RuntimeError as exc:
        pytest.fail(f"could not start the test PostgreSQL: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """A URL (with its password) to a fresh, empty database, dropped after the test."""
    name = postgres_cluster.create_database()
    try:
        yield postgres_cluster.url(name)
    finally:
        postgres_cluster.drop_database(name)
