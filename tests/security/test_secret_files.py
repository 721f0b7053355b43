"""The coordinator's secrets come from files, not its command line or environment (issue 25,
item 10).

Any user of the host can read a process's ``/proc/<pid>/cmdline``, and every process of the
coordinator's user (a tool it runs, too) its ``/proc/<pid>/environ``. ``--admin-token-file``
and ``${file:PATH}`` in an agents file keep the admin token and an adapter's credentials out
of both.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from subprocs import free_port, start_coordinator

from reach.adapters.config import AgentsFileError, parse_agents
from reach.adapters.http import HttpAgent

SECRET = "adm-7f3c1e9b5a2d4c6e8f0a1b2c3d4e5f60"


async def test_the_admin_token_is_read_from_a_file(spawn: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "admin.token"
    token_file.write_text(SECRET + "\n")
    token_file.chmod(0o600)
    coord = start_coordinator(spawn, "coord", free_port(), tmp_path / "r.db",
                              "--admin-token-file", str(token_file), "--no-http")
    banner = await coord.wait_for("reach-dash --url")
    assert banner.endswith(f"--token {SECRET}")  # the file's token, its newline dropped
    with open(f"/proc/{coord.pid}/cmdline", "rb") as f:
        assert SECRET.encode() not in f.read()
    with open(f"/proc/{coord.pid}/environ", "rb") as f:
        assert SECRET.encode() not in f.read()


@pytest.mark.parametrize(("args", "said"), [
    (["--admin-token", "x", "--admin-token-file", "{file}"], "not both"),
    (["--admin-token-file", "{missing}"], "cannot read"),
    (["--admin-token-file", "{empty}"], "is empty"),
])
def test_a_token_file_that_cannot_be_used_is_one_line(tmp_path: Path, args: list[str],
                                                      said: str) -> None:
    (tmp_path / "t").write_text(SECRET)
    (tmp_path / "e").write_text("\n")
    paths = {"file": tmp_path / "t", "missing": tmp_path / "nope", "empty": tmp_path / "e"}
    done = subprocess.run([sys.executable, "-m", "reach.cli", "serve", "--port", "0",
                           "--store", "sqlite://", *(a.format(**paths) for a in args)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert said in done.stderr and len(done.stderr.splitlines()) == 1


def test_an_agents_file_reads_a_credential_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "orders.token"
    secret.write_text("s3cret-from-a-file\n")
    [agent] = parse_agents(
        '[[agent]]\nkind = "http"\nname = "orders"\nurl = "http://127.0.0.1:9"\n'
        f'headers = {{ Authorization = "Bearer ${{file:{secret}}}" }}\n'
        '[agent.capabilities."orders.get"]\npath = "/o"\n', env={})
    assert isinstance(agent, HttpAgent)
    assert agent.headers == {"Authorization": "Bearer s3cret-from-a-file"}
    with pytest.raises(AgentsFileError, match=r"cannot read .*nope \(used as \$\{file:"):
        parse_agents('[[agent]]\nkind = "http"\nname = "o"\nurl = "http://127.0.0.1:9"\n'
                     f'headers = {{ A = "${{file:{tmp_path}/nope}}" }}\n'
                     '[agent.capabilities."o.get"]\npath = "/o"\n', env={})


def test_a_secret_file_is_small_utf8_text(tmp_path: Path) -> None:
    from reach.envvars import MAX_FILE_BYTES, read_secret
    big, binary = tmp_path / "big", tmp_path / "bin"
    big.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="over 65536 bytes"):
        read_secret(str(big), "here", ValueError)
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        read_secret(str(binary), "here", ValueError)
    (tmp_path / "ok").write_text("a\n\n")
    assert read_secret(str(tmp_path / "ok"), "here", ValueError) == "a\n"  # one newline
