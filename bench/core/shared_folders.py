"""Folders other local users may write to (/tmp, and any folder others may write to), and the rule bench keeps
wherever a path it opens or makes passes through one, so that no other user can point bench at a file of their
choosing. The kernel keeps a like rule (fs.protected_symlinks, fs.protected_regular), but only where the machine
turns it on; bench keeps its own either way:

- a folder every user may write to that is not sticky is refused on the way: anyone may rename what is in it;
- in a shared folder (sticky and writable by others than its owner, as /tmp is), a link, file or folder is used only
  where it belongs to this user or to the folder's owner: nobody else may remove or replace it there, so what was
  checked stays what is opened;
- what bench makes there is made exclusively and never through a link, under a name nobody can guess (tempfile's
  mkstemp and mkdtemp), or is made first and checked after (a folder another user made first under that name is
  theirs, and refused).

The cores' lock folder (bench.harness.cores), which bench shares with other users on purpose, keeps to a stricter
form (folder_problem, open_file), as do the results store and its run directories (bench.core.store,
bench.core.rundir), a run's temporary folders in /tmp (bench.harness.supervisor) and the folder of records kept
where a disk was full (bench.harness.keep).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from pathlib import Path

# flags for every file opened in a shared folder: never through a link; NONBLOCK, so that a FIFO planted under the
# name never blocks
NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
MAX_LINKS = 40  # Linux's own limit: a loop of links is left to the open that follows, which says so


class UnsafePath(OSError):
    """A path that passes through a link, file or folder another user could choose (strerror says which, where)."""

    def __init__(self, problem: str):
        super().__init__(errno.EPERM, problem)
        self.problem = problem


def owner(uid: int) -> str:
    """'nobody (uid 65534)', or 'uid N' where the user has no name."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def is_shared(info: os.stat_result) -> bool:
    """A folder others than its owner may make files in, but not remove another's (sticky), as /tmp."""
    return stat.S_ISDIR(info.st_mode) and bool(info.st_mode & 0o022) and bool(info.st_mode & stat.S_ISVTX)


def open_to_all(info: os.stat_result) -> bool:
    """A folder every user may write to and that is not sticky: anyone may remove or replace what is in it."""
    return stat.S_ISDIR(info.st_mode) and bool(info.st_mode & 0o002) and not info.st_mode & stat.S_ISVTX


def folder_problem(info: os.stat_result) -> str | None:
    """Why a folder bench shares with other users on purpose (the cores' lock folder) may not be used: it belongs to
    another user than this one or root, or others may write to it and it is not sticky; None where it may."""
    if info.st_uid not in (os.geteuid(), 0):
        return f"belongs to {owner(info.st_uid)}, not to you or root"
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        return f"may be written by other users (mode {stat.S_IMODE(info.st_mode):o}) and is not sticky"
    return None


def open_file(folder_fd: int, name: str, flags: int, mode: int = 0o644) -> int:
    """A file of a shared folder, never through a symbolic link, and only a regular file with one name (OSError
    else)."""
    fd = os.open(name, flags | NOFOLLOW, mode, dir_fd=folder_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise OSError(errno.EPERM, "not a regular file with one name", name)
    return fd


def open_or_create(folder_fd: int, name: str, flags: int, mode: int = 0o644) -> tuple[int, bool]:
    """(`name` opened, whether this call made it): made with `mode` where it does not exist. Creation is exclusive:
    an existing file is opened as it is, never made anew nor changed in mode."""
    while True:
        try:
            return open_file(folder_fd, name, flags), False
        except FileNotFoundError:
            pass
        try:
            return open_file(folder_fd, name, flags | os.O_CREAT | os.O_EXCL, mode), True
        except FileExistsError:  # made in between by another process
            continue


def _kind(info: os.stat_result) -> str:
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    return "a folder" if stat.S_ISDIR(info.st_mode) else "a file"


def check_path(path: str | os.PathLike[str], make: bool = False) -> list[Path]:
    """Raise UnsafePath where `path` passes through a folder every user may write to that is not sticky, or through
    a link, file or folder in a shared folder that belongs neither to this user nor to that folder's owner (its
    links followed as the kernel would, each checked where it lies). A part that does not exist ends the check, or,
    with `make` (`path` is then a folder), is made (checked after: another user may have made it first) and the walk
    goes on. Returns the folders it made, deepest first; refused, it leaves none of them. Other errors (a part
    that cannot be searched) end the check too: the open that follows says them."""
    text = os.fspath(path)
    todo = text.split("/")[::-1]  # the parts still to walk, the next one last
    made: list[Path] = []
    links = 0
    try:
        try:
            here = "/" if text.startswith("/") else os.getcwd()
            info = os.stat(here)
        except OSError:  # a current folder removed, say
            return made
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":  # `here` has no link left in it: its parent is the kernel's '..'
                here = os.path.dirname(here)
                try:
                    info = os.stat(here)
                except OSError:
                    return made
                continue
            if open_to_all(info):
                raise UnsafePath(f"{here} may be written by every user and is not sticky: anyone may replace {name}")
            entry = os.path.join(here, name)
            try:
                found = os.lstat(entry)
            except (FileNotFoundError, NotADirectoryError):
                if not make:
                    return made
                try:
                    os.mkdir(entry)
                    made.insert(0, Path(entry))
                except FileExistsError:  # made meanwhile by another process: checked below
                    pass
                found = os.lstat(entry)
            except OSError:
                return made
            if is_shared(info) and found.st_uid not in (os.geteuid(), info.st_uid):
                raise UnsafePath(
                    f"{entry} is {_kind(found)} of {owner(found.st_uid)} in {here}, a folder every user may write to"
                )
            if stat.S_ISLNK(found.st_mode):
                links += 1
                if links > MAX_LINKS:
                    return made
                try:
                    target = os.readlink(entry)
                    if target.startswith("/"):
                        here, info = "/", os.stat("/")
                except OSError:
                    return made
                todo += target.split("/")[::-1]
                continue
            here, info = entry, found
        if open_to_all(info):
            raise UnsafePath(f"{here} may be written by every user and is not sticky: anyone may replace what is in it")
        if make and not stat.S_ISDIR(info.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", here)
    except BaseException:
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return made
