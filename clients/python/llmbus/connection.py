"""Finding a running `llmbus serve`: the connection file it writes (mode 0600) while it runs,
$XDG_RUNTIME_DIR/llmbus/<name>.json, or ~/.cache/llmbus/<name>.json without XDG_RUNTIME_DIR.

A connection file is one JSON object:
  nats_url                 "nats://127.0.0.1:PORT"
  nats_user                the tenant's NATS user ("tenant-default"; also read as `user`)
  nats_password_file       a 0600 file holding its password (also read as `password_file`)
  operator_user, operator_password_file   the operator's login (status), when given
  http_url                 the OpenAI front door ("http://127.0.0.1:8000/v1"), or absent
  models                   the served model names
  pid, pid_start           the process id of that `llmbus serve` and its start time (clock
                           ticks since boot, /proc/PID/stat field 22: a reused pid is not it)
  tenant, prefix, name     optional
The newest file whose serve is alive is the default; `name` (or the file name without .json)
picks one."""
import json
import os
from dataclasses import dataclass, field
from typing import List, Optional

from .errors import ConnectionFileError


@dataclass
class Connection:
    nats_url: str
    user: Optional[str] = None
    password_file: Optional[str] = None
    http_url: Optional[str] = None
    models: List[str] = field(default_factory=list)
    pid: Optional[int] = None
    pid_start: Optional[int] = None
    operator_user: Optional[str] = None
    operator_password_file: Optional[str] = None
    tenant: str = "default"
    prefix: str = "llm"
    path: Optional[str] = None

    def password(self, which="password_file"):
        """The password in password_file (or operator_password_file), trailing newline dropped;
        None without a file."""
        path = getattr(self, which)
        if not path:
            return None
        try:
            with open(path) as f:
                return f.read().rstrip("\n")
        except OSError as exc:
            raise ConnectionFileError(f"{self.path}: cannot read its password file: {exc}") from exc


def directories():
    """Where connection files live, in the order they are searched."""
    dirs = []
    if os.environ.get("XDG_RUNTIME_DIR"):
        dirs.append(os.path.join(os.environ["XDG_RUNTIME_DIR"], "llmbus"))
    dirs.append(os.path.join(os.path.expanduser("~"), ".cache", "llmbus"))
    return dirs


def _alive(pid, pid_start=None):
    if not pid:
        return True  # a file that names no process is taken at its word
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    if pid_start is not None:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[19]) == pid_start
        except (OSError, ValueError, IndexError):
            return True
    return True


def load(path):
    """The Connection of one file; ConnectionFileError names what is wrong with it."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConnectionFileError(f"{path}: {exc}") from exc
    if not isinstance(d, dict) or not isinstance(d.get("nats_url"), str):
        raise ConnectionFileError(f"{path}: not an llmbus connection file (no nats_url)")
    user = d.get("nats_user") or d.get("user")
    tenant = d.get("tenant") or (user[len("tenant-"):] if isinstance(user, str) and user.startswith("tenant-")
                                 else "default")
    pid, pid_start = d.get("pid"), d.get("pid_start")
    return Connection(nats_url=d["nats_url"], user=user,
                      password_file=d.get("nats_password_file") or d.get("password_file"),
                      http_url=d.get("http_url"), models=list(d.get("models") or []),
                      pid=pid if isinstance(pid, int) else None,
                      pid_start=pid_start if isinstance(pid_start, int) else None,
                      operator_user=d.get("operator_user"), operator_password_file=d.get("operator_password_file"),
                      tenant=tenant, prefix=d.get("prefix") or "llm", path=path)


def find(name=None):
    """The connection file called name (a path, or NAME / NAME.json in the directories), or
    without a name the newest one whose `llmbus serve` is still running."""
    if name:
        candidates = [name] if os.sep in name else [
            os.path.join(d, n) for d in directories() for n in (name, name + ".json")]
        for path in candidates:
            if os.path.isfile(path):
                return load(path)
        raise ConnectionFileError(f"no connection file {name!r} (looked in {', '.join(directories())})")
    found = []
    for d in directories():
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for n in entries:
            path = os.path.join(d, n)
            if n.endswith(".json") and os.path.isfile(path):
                found.append((os.path.getmtime(path), path))
    for _, path in sorted(found, reverse=True):
        try:
            conn = load(path)
        except ConnectionFileError:
            continue
        if _alive(conn.pid, conn.pid_start):
            return conn
    raise ConnectionFileError("no running `llmbus serve` found (no live connection file in "
                              f"{', '.join(directories())}); start one, or pass url=, user=, password=")
