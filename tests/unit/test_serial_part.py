"""`make pytest-serial`'s command line (tests/conftest.py's `serial_paths`): every file SERIAL marks is passed once, in
SERIAL's order, so that the part's order is the one written there and no test it marks is left out of both parts."""

from __future__ import annotations

from tests.conftest import ROOT, SERIAL, serial_paths


def test_every_serial_file_is_passed_once_in_serials_order() -> None:
    paths = serial_paths()
    assert len(paths) == len(set(paths))
    folders = [entry for entry in SERIAL if not entry.endswith(".py")]
    marked = {entry for entry in SERIAL if entry.endswith(".py")} | {
        p.relative_to(ROOT).as_posix() for folder in folders for p in (ROOT / folder).glob("test_*.py")
    }
    assert set(paths) == marked
    named = [entry for entry in SERIAL if entry.endswith(".py")]
    assert [p for p in paths if p in named] == named
    assert all((ROOT / p).is_file() for p in paths)


def test_a_folders_files_not_named_come_at_the_folders_place() -> None:
    paths = serial_paths()
    for folder in (entry for entry in SERIAL if not entry.endswith(".py")):
        before = SERIAL[: SERIAL.index(folder)]
        unnamed = [p for p in paths if p.startswith(folder) and p not in SERIAL]
        if unnamed:  # after the files named before the folder's entry, before those named after it
            assert set(paths[: paths.index(unnamed[0])]) == {p for p in before if p.endswith(".py")}
