"""A Spark standalone cluster on 127.0.0.1: a master and workers started
with pyspark's ``bin/spark-class`` (pyspark's wheel has no ``sbin/start-master.sh``),
executors in their own JVMs, stopped (and their executors with them) by :meth:`stop`.

Shared by the slow tests (tests/spark/test_cluster.py, test_environment.py and
test_cli_cluster.py, through the session-scoped ``cluster`` fixture of
tests/spark/conftest.py) and ``python -m tools.bench spark-cluster``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import simstore

HOST = "127.0.0.1"
# the checkout (or site-packages) the driver imports simstore from: executors import the
# same files (an editable install of another checkout would fail the build check)
SOURCE = str(Path(simstore.__file__).parent.parent)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _children(pid: int) -> list[int]:
    """pid's child processes (each of its threads lists the children it started)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Cluster:
    """Master + n one-core workers (worker_memory each) on 127.0.0.1, logs in work.
    java_options: more JVM options for the daemons and the executors (in conf()), e.g. the
    tests' quicker start (tests/spark/data.py)."""

    def __init__(self, work: Path, workers: int = 2, worker_memory: str = "1g",
                 java_options: str = "") -> None:
        self.work = work
        self.java_options = java_options
        self.port = _free_port()
        self.url = f"spark://{HOST}:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_GATEWAY_PORT")}
        self.env.update(SPARK_LOCAL_IP=HOST, SPARK_DAEMON_MEMORY="256m",
                        SPARK_WORKER_DIR=str(work / "work"), SPARK_NO_DAEMONIZE="1")
        if java_options:
            self.env["SPARK_DAEMON_JAVA_OPTS"] = java_options
        try:
            self._start("master", "org.apache.spark.deploy.master.Master", "--host", HOST,
                        "--port", str(self.port), "--webui-port", str(_free_port()))
            for i in range(workers):
                self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                            "--host", HOST, "--cores", "1", "--memory", worker_memory,
                            "--webui-port", str(_free_port()),
                            "--work-dir", str(work / f"work{i}"))
            self._wait(workers)
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, cls: str, *args: str) -> None:
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        self.procs.append(subprocess.Popen([_spark_class(), cls, *args], stdout=log,
                                           stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True))

    def _wait(self, workers: int, timeout: float = 90) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited ({p.args[1]}); logs in {self.work}")
            up = sum("Successfully registered with master" in (self.work / f"worker{i}.log")
                     .read_text(errors="replace") for i in range(workers))
            if up == workers:
                return
            time.sleep(0.5)
        raise RuntimeError(
            f"Spark workers did not register in {timeout:.0f} s; logs in {self.work}")

    def conf(self, *, source: bool = True) -> dict[str, str]:
        """A session's settings for this cluster: one 1-core, 512 MB executor per worker,
        the driver on 127.0.0.1; source: executors import the driver's simstore files."""
        conf = {
            "spark.driver.host": HOST, "spark.driver.bindAddress": HOST,
            "spark.executor.memory": "512m", "spark.executor.cores": "1",
            "spark.cores.max": str(len(self.procs) - 1), "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "4",
        }
        # set either way: pyspark's builder keeps the options of earlier sessions
        conf["spark.executorEnv.PYTHONPATH"] = SOURCE if source else ""
        if self.java_options:
            conf["spark.executor.extraJavaOptions"] = self.java_options
        return conf

    def executors(self) -> list[int]:
        """The pids of the executor JVMs the workers run now."""
        return [c for p in self.procs[1:] for c in _children(p.pid)
                if "CoarseGrainedExecutorBackend" in _cmdline(c)]

    def kill_executor(self) -> int:
        """SIGKILL one running executor (with its Python workers' parent); its pid."""
        pids = self.executors()
        if not pids:
            raise RuntimeError("no executor is running")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def stop(self) -> None:
        """Stop the workers (their executors die with them) and the master."""
        for p in reversed(self.procs):
            for child in _children(p.pid):
                _kill(child)
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":  # pragma: no cover - by hand: start a cluster, Enter stops it
    import tempfile

    c = Cluster(Path(tempfile.mkdtemp(prefix="simstore-cluster-")))
    print(c.url, c.work, file=sys.stderr)
    try:
        input()
    finally:
        c.stop()
