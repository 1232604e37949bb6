"""How figures are written for people: byte sizes, latencies and shares (pure functions: number -> text).

Every report (the verdict, the detail, the bench tables, the amplification line) writes its numbers with these, so
that one figure reads the same wherever it is printed.
"""


def size(n):
    """Bytes in binary units: 512 B, 1.5 KiB, 68.6 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


def us(v):
    """A latency in microseconds, as us below 1 ms and ms above."""
    return "%.1f us" % v if v < 1000 else "%.2f ms" % (v / 1000.0)


def percent(share, digits=1, width=0, space=True, none="n/a"):
    """A share (0.25) as a percentage ('25.0 %'): digits after the point, right-aligned in width columns (the
    number alone), a space before the sign or none (a table's narrow column); none: the text for a share that is
    not known."""
    if share is None:
        return none
    return "%*.*f%s%%" % (width, digits, 100.0 * share, " " if space else "")
