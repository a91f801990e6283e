"""Where the driver's class-data archive is looked for, and the options that map it."""

from __future__ import annotations

import sys


def test_the_options_name_the_archive_only_where_it_is(tmp_path, monkeypatch):
    from streaming import class_archive

    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert class_archive.driver_java_options() is None
    built = class_archive.archive_path()
    built.parent.mkdir(parents=True)
    built.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={built}" in class_archive.driver_java_options()
