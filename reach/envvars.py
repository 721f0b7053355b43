"""``${NAME}`` in a configuration file's strings, from the environment (the ``--agents`` and
``--alerts`` files share it): ``$$`` is a literal ``$``, and an unset variable is an error of
the file's own kind, naming where it was used. ``${file:PATH}`` is the text of the file PATH
(one trailing newline dropped; a relative PATH is taken from the current directory): a
secret kept in a file readable only by the coordinator's user is not in its environment,
which every process of that user can read from ``/proc/<pid>/environ`` (docs/security.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{file:([^}]+)\}")
MAX_FILE_BYTES = 64 << 10  # a secret, not a document


def expand(value: Any, env: Mapping[str, str], where: str, error: type[Exception]) -> Any:
    """``value`` with ``${NAME}`` replaced in every string of it (tables and lists included)."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            if m.group(2) is not None:
                return read_secret(m.group(2), where, error)
            if m.group(1) is None:
                return "$"
            if m.group(1) not in env:
                raise error(f"{where}: environment variable {m.group(1)} is not "
                            f"set (used as ${{{m.group(1)}}})")
            return str(env[m.group(1)])
        return VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand(v, env, where, error) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, env, where, error) for v in value]
    return value


def read_secret(path: str, where: str, error: type[Exception]) -> str:
    """The text of the file ``path`` (a secret: one trailing newline dropped), or ``error``
    naming ``where`` when it cannot be read or is over ``MAX_FILE_BYTES``."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise error(f"{where}: cannot read {path} (used as ${{file:{path}}}): "
                    f"{exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise error(f"{where}: {path} is over {MAX_FILE_BYTES} bytes; a secret file holds "
                    f"one secret")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{where}: {path} is not UTF-8 text") from None
    return text[:-1] if text.endswith("\n") else text
