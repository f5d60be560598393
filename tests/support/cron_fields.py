"""Hypothesis strategies for cron fields: the terms ``*/s``, ``v``, ``a-b``, ``a-b/s``,
``v/s`` over a field's range, with favourite values weighted in and month/day names sometimes
spelled out. Shared by the cronsim and croniter property tests."""

from __future__ import annotations

from hypothesis import strategies as st


def numbers(lo: int, hi: int, favourites: list[int]) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(favourites), st.integers(lo, hi))


@st.composite
def term(
    draw: st.DrawFn,
    lo: int,
    hi: int,
    favourites: list[int],
    names: list[str] | None = None,
    min_step: int = 1,
) -> str:
    num = numbers(lo, hi, favourites)
    span = hi - lo + 1

    def show(v: int) -> str:
        if names is not None and v - lo < len(names) and draw(st.integers(0, 3)) == 0:
            name = names[v - lo]
            return draw(st.sampled_from([name, name.lower(), name.title()]))
        return str(v)

    kind = draw(st.sampled_from(["star_step", "value", "range", "range_step", "start_step"]))
    step = draw(st.integers(min_step, span))
    if kind == "star_step":
        return f"*/{step}"
    if kind == "value":
        return show(draw(num))
    a = draw(num)
    if kind == "start_step":
        return f"{show(a)}/{step}"
    if a == hi:
        a = hi - 1
    b = draw(st.integers(a + 1, hi))  # never a-a: cronsim reads "5-5/2" as "5/2"
    if kind == "range":
        return f"{show(a)}-{show(b)}"
    return f"{show(a)}-{show(b)}/{step}"


@st.composite
def field(
    draw: st.DrawFn,
    lo: int,
    hi: int,
    favourites: list[int],
    star_weight: int,
    names: list[str] | None = None,
    min_step: int = 1,
    allow_star: bool = True,
) -> str:
    if allow_star and draw(st.integers(0, 9)) < star_weight:
        return "*"
    terms = draw(st.lists(term(lo, hi, favourites, names, min_step), min_size=1, max_size=3))
    return ",".join(terms)


MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
