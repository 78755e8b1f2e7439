"""Helpers that craft archives of agents.files.safe_archive: edit a saved file's manifest or
members and write it back with every checksum recomputed, as a forger would."""

from __future__ import annotations

import hashlib
import json
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def write_members(
    path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_STORED
) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        for name, content in members.items():
            zf.writestr(name, content)
    return path


def rewrite(
    path: Path,
    edit: Callable[[dict[str, Any]], Any],
    members: dict[str, bytes] | None = None,
    out: Path | None = None,
    compression: int = zipfile.ZIP_STORED,
    drop: tuple[str, ...] = (),
) -> Path:
    """``path`` (or ``out``) rewritten with ``edit(manifest)`` applied, member bytes replaced by
    ``members``, the members named in ``drop`` left out, and the members' and manifest's
    checksums recomputed (a valid forgery)."""
    found = read_members(path)
    manifest = json.loads(found.pop("manifest.json"))
    found.pop("manifest.sha256", None)
    found.update(members or {})
    for name in drop:
        del found[name]
    edit(manifest)
    manifest["members"] = {
        name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        for name, data in found.items()
    }
    text = json.dumps(manifest).encode()
    return write_members(
        out or path,
        {
            "manifest.json": text,
            "manifest.sha256": hashlib.sha256(text).hexdigest().encode(),
            **found,
        },
        compression,
    )


def set_attribute(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit of a model file's manifest: attribute ``name`` set to the JSON ``value``."""

    def edit(manifest: dict[str, Any]) -> None:
        manifest["data"][name] = value

    return edit


def rewrite_sb3_data(path: Path, edit: Callable[[dict[str, Any]], Any], out: Path) -> Path:
    """``out``: the Stable-Baselines3 zip ``path`` with ``edit(data)`` applied to its ``data``
    member (JSON text whose values SB3 pickles; they are left encoded)."""
    found = read_members(path)
    data = json.loads(found["data"])
    edit(data)
    found["data"] = json.dumps(data).encode()
    return write_members(out, found)


def write_overlapping(path: Path, members: dict[str, bytes], kernel: bytes, copies: int) -> Path:
    """``path``: a stored zip of ``members``, then ``copies`` members ``pad<i>.pt`` whose data
    overlap: each one's bytes are the local headers of those after it and ``kernel`` (a file of
    about ``len(kernel)`` bytes whose members add up to ``copies * len(kernel)``)."""
    chain, data = [], kernel
    for i in reversed(range(copies)):
        info = zipfile.ZipInfo(f"pad{i}.pt")
        info.CRC, info.file_size, info.compress_size = zlib.crc32(data), len(data), len(data)
        header = info.FileHeader(zip64=False)
        chain.append((info, header))
        data = header + data
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in members.items():
            zf.writestr(name, content)
        offset = zf.fp.tell()
        zf.fp.write(data)
        for info, header in reversed(chain):
            info.header_offset = offset
            offset += len(header)
            zf.filelist.append(info)
            zf.NameToInfo[info.filename] = info
        zf.start_dir = zf.fp.tell()
    return path
