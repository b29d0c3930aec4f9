"""How `process list` and `process show` put what a process did in a few words."""

from __future__ import annotations

from lakewarden.cli.processes import result_text


def test_an_optimizing_process_says_what_it_rewrote_and_what_it_left_to_writers() -> None:
    summary = {"files_in": 6, "files_out": 2, "bytes_in": 6144, "bytes_out": 3072, "groups_yielded": 1}
    text = result_text({"action": "optimizing", "summary": summary})
    assert text == "6 -> 2 files, 6.0 KiB -> 3.0 KiB; 1 file group(s) left to writers"
    assert "left to writers" not in result_text({"action": "optimizing", "summary": {**summary, "groups_yielded": 0}})
