"""A process's tree read from /proc: its descendants, their resident memory and their CPU time. The load test
bounds a worker's memory with it, and the benchmarks' stack (benchmarks/stack.py) measures its processes with it."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """pid and every process under it alive now (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int(_stat_fields(int(entry.name))[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def tree_rss_kib(pid: int) -> int:
    """VmRSS of a process and all its descendants, in KiB (a process that vanished meanwhile counts 0)."""
    return sum(vm_rss_kib(each) for each in descendants(pid))


def mapping_rss_kib(pid: int) -> dict[str, int]:
    """Resident KiB of each memory mapping of a process, named by its start address and what it maps ([heap], a
    file's name, or [anon]: a glibc thread arena's heaps start at multiples of 64 MiB); empty once the process is
    gone. It says which heap a step in a worker's RSS came from."""
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return {}
    mappings: dict[str, int] = {}
    name = ""
    for fields in map(str.split, lines):
        if fields[0] == "Rss:":
            mappings[name] = mappings.get(name, 0) + int(fields[1])
        elif not fields[0].endswith(":"):  # a mapping's own line: start-end perms offset device inode [path]
            name = f"{fields[0].split('-')[0]} {Path(fields[5]).name if len(fields) > 5 else '[anon]'}"
    return mappings


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process, its descendants alive now and the children they
    have waited for."""
    total = 0
    for each in descendants(pid):
        try:
            total += sum(int(value) for value in _stat_fields(each)[11:15])  # utime stime cutime cstime
        except (OSError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state, ppid, ... (field 3 of proc(5) is index 0)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def vm_rss_kib(pid: int) -> int:
    """VmRSS of one process, in KiB; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
