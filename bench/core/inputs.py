"""What bench takes from outside itself and must not trust: names that become parts of paths, and files a user
names.

- Names (`name_problem`, `check_name`): run ids and sweep ids become folder names (runs/RUN_ID) and table cells,
  wherever they come from (a flag, a store, a baseline file, `bench import`); a workload is a name or an address to
  the user's code (`workload_problem`).
- Files (`read_regular_file`): a baseline, a hostfile, a run's record.json. Only a regular file is read, and only up
  to a limit: a FIFO would block the reader forever and a device (/dev/zero) never ends.
- Text shown on a terminal (`terminal_text`, `shown`): what came from outside (a file's line, a path, a workload's
  exception) never reaches it with a control character of its own (ESC, "\r"), which a terminal would obey.
"""

from __future__ import annotations

import os
import re
import stat

from bench.core.errors import UsageError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_MAX = 128
NAME_RULE = f"1 to {NAME_MAX} letters, digits, '.', '_' or '-', starting with a letter or digit"
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
ADDRESS_MAX = 4096  # a workload file's path: PATH_MAX

MiB = 1 << 20
RECORD_LIMIT = 64 * MiB  # one run's record.json or spec.json (a record is kilobytes; its rank map grows with ranks)
RUNS_FILE_LIMIT = 256 * MiB  # a baseline or current runs file: thousands of records
HOSTFILE_LIMIT = 1 * MiB  # one line per host


def shown(value: object) -> str:
    """A value for a one-line message: as it is when it is a name, else quoted (a newline stays on its line) and cut."""
    if isinstance(value, str) and name_problem(value) is None:
        return value
    text = ascii(value)
    return text if len(text) <= 80 else text[:77] + "..."


# a lone surrogate: what Python makes of a byte of a file name that is not UTF-8 (os.fsdecode keeps it as U+DC80 to
# U+DCFF), or what a JSON "\ud800" escape reads as; no UTF-8 page, file or terminal can take one
SURROGATE = re.compile(r"[\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` as UTF-8 can write it (a page, a terminal's line): a byte of a file name that is not UTF-8 as its
    escape, `\\xff`; any other lone surrogate as `\\udXXX`. Text without one is returned as it is. For text to show:
    a path to be used again (in a script) keeps its bytes instead (os.fsencode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return SURROGATE.sub(_escaped, text)
    return text


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


# C0 (ESC starts a terminal's command, "\r" rewrites the line, "\n" starts another), DEL and C1 (U+009B is a
# one-character ESC [)
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
CONTROL_NAMES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def terminal_text(text: str, keep_newlines: bool = False) -> str:
    """`text` as a terminal may show it: every control character as its escape (`\\x1b`, `\\r`, `\\n`), and what
    UTF-8 cannot write as printable() writes it. For messages that carry what came from outside bench (a file's
    line, a path, a workload's exception) on their way to stderr or stdout; `keep_newlines` for a message that is
    several lines on purpose (a setup failure and its logs' tails)."""

    def escaped(found: re.Match[str]) -> str:
        char = found.group()
        if keep_newlines and char == "\n":
            return char
        return CONTROL_NAMES.get(char, f"\\x{ord(char):02x}")

    return printable(CONTROL.sub(escaped, text))


def name_problem(value: object) -> str | None:
    """Why `value` cannot be a run id or sweep id (NAME_RULE), or None when it can."""
    if not isinstance(value, str):
        return f"it is a {type(value).__name__}, not a string"
    if not value:
        return "it is empty"
    if len(value) > NAME_MAX:
        return f"it is {len(value)} characters long, more than {NAME_MAX}"
    if "/" in value or "\\" in value:
        return "it holds a path separator"
    if ".." in value:
        return "it holds '..'"
    if not NAME.fullmatch(value):
        return f"names are {NAME_RULE}"
    return None


def check_name(value: object, what: str) -> str:
    """`value` when it is a name, else a UsageError naming `what` (a flag, "run id")."""
    problem = name_problem(value)
    if problem or not isinstance(value, str):  # (a value that is not a string has a problem)
        raise UsageError(f"{what} {shown(value)} is not a name ({problem}); names are {NAME_RULE}")
    return value


def workload_problem(value: object) -> str | None:
    """Why `value` cannot be a stored workload, or None: absent (a run that trains nothing), a name, or an address to
    the user's code as workloads.external keeps it (PKG.MODULE:NAME, or a .py file's path, normalised, and :NAME)."""
    if value is None or name_problem(value) is None:
        return None
    if not isinstance(value, str):
        return f"it is a {type(value).__name__}, not a string"
    where, _, name = value.rpartition(":")
    if not where or not IDENTIFIER.fullmatch(name):
        return f"it is neither a name ({NAME_RULE}) nor an address PKG.MODULE:NAME or path/to/file.py:NAME"
    if where.endswith(".py"):
        if len(value) > ADDRESS_MAX or any(ord(c) < 32 or c == "\x7f" for c in where):
            return "its file's path is too long or holds control characters"
        if ".." in where.split("/"):
            return "its file's path holds '..'"
        return None
    return None if MODULE.fullmatch(where) else f"{where!r} is neither a .py file nor a dotted module name"


def _mib(size: int) -> str:
    return f"{size // MiB} MiB" if size and size % MiB == 0 else f"{size:,} bytes"


def read_regular_file(path: str | os.PathLike[str], what: str, limit: int, hint: str = "") -> bytes:
    """The bytes of the file a user named as `what` ("baseline file", "--hostfile"), or a UsageError of one line
    (ending with `hint`) when it is missing, a directory, anything but a regular file, or larger than `limit`
    bytes. The file is looked at (stat) before it is opened, and opened without blocking, so that neither a FIFO
    nor a device is ever read."""
    said = f"{what} {path}"
    tail = f"; {hint}" if hint else ""

    def refused(why: str) -> UsageError:
        return UsageError(f"{said} {why}{tail}")

    def regular(st: os.stat_result) -> None:
        if stat.S_ISDIR(st.st_mode):
            raise refused("is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise refused(f"is not a regular file (it is a {_kind(st.st_mode)}); give a file")
        if st.st_size > limit:
            raise refused(f"is {_mib(st.st_size)}, more than the {_mib(limit)} a {what} may be")

    try:
        regular(os.stat(path))
        # O_NONBLOCK: a FIFO put in its place since the stat opens at once (and is refused below) instead of waiting
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise refused("does not exist") from None
    except OSError as exc:
        raise refused(f"cannot be read ({exc.strerror or exc})") from None
    try:
        regular(os.fstat(fd))
        chunks, size = [], 0
        while True:  # to the limit and one byte more: a file that grew past it since the stat is refused too
            chunk = os.read(fd, min(MiB, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise refused(f"is more than the {_mib(limit)} a {what} may be")
    except OSError as exc:
        raise refused(f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text_file(path: str | os.PathLike[str], what: str, limit: int, hint: str = "") -> str:
    """read_regular_file, decoded as UTF-8 (a file that is not text is the same one-line refusal)."""
    data = read_regular_file(path, what, limit, hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{what} {path} is not UTF-8 text ({exc.reason} at byte {exc.start})" + (f"; {hint}" if hint else "")
        ) from None


def _kind(mode: int) -> str:
    for test, word in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return word
    return "special file"
