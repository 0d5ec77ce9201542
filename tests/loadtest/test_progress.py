"""The progress display: redrawn in place within the terminal's width on a terminal, a few
plain lines anywhere else (a piped run's log held one 11.7 KB line of 125 redraws)."""

from __future__ import annotations

import io

from router.loadtest.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_pipe_gets_a_plain_line_every_interval_and_the_last_one_at_the_end() -> None:
    out = io.StringIO()
    bar = Progress(600, "default@10/s", stream=out, every_s=10.0)
    for tick in range(0, 125):  # a 62 s run's ticks, every 0.5 s
        bar.update(sent=tick * 5, done=tick * 5, errors=0, elapsed_s=tick * 0.5)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert [line.split("done")[0].split()[-1] for line in lines] == [
        "0/600", "100/600", "200/600", "300/600", "400/600", "500/600", "600/600", "620/600"]


def test_a_pipe_gets_no_second_copy_of_a_line_already_written() -> None:
    out = io.StringIO()
    bar = Progress(10, "mix@1/s", stream=out, every_s=10.0)
    bar.update(sent=10, done=10, errors=1, elapsed_s=0.0)
    bar.close()
    assert out.getvalue().count("\n") == 1 and "10/10 done" in out.getvalue()


def test_a_terminal_line_is_redrawn_in_place_within_its_width() -> None:
    for columns in (120, 80, 60, 30):
        out = _Terminal()
        bar = Progress(5000, "default@1000/s", stream=out, columns=columns)
        bar.update(sent=4999, done=4321, errors=12, elapsed_s=123.4)
        written = out.getvalue()
        assert written.startswith("\r\x1b[K")
        line = written.removeprefix("\r\x1b[K")
        assert 0 < len(line) <= columns - 1, (columns, line)
        if columns >= 80:
            assert "[" in line and "4321/5000 done" in line and "12 errors" in line
    bar.close()
    assert out.getvalue().endswith("\n")
