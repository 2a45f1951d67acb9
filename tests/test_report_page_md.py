"""report_common.page_md: a tables.md table made to fit the book's ~700-px column."""



from asyncpp.study.ladder import report_common as rc

NB = rc.NBSP


def _rows(md: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip()[1:-1].split("|")] for ln in md.splitlines()
            if ln.startswith("|") and "---" not in ln]


def test_short_cells_and_values_stay_on_one_line_and_prose_is_untouched():
    md = ("Text with 1 ± 2 stays.\n\n| optimizer | comparison | note |\n| --- | --- | --- |\n"
          "| AdamW | async − sync | a long remark, +0.1 ± 0.2 [−0.1, +0.3], 27 % of it |")
    out = rc.page_md(md)
    assert out.splitlines()[0] == "Text with 1 ± 2 stays."
    row = _rows(out)[1]
    assert row[1] == f"async{NB}−{NB}sync"  # short: no break anywhere
    # long: breaks only between values, never inside one
    assert f"+0.1{NB}±{NB}0.2" in row[2] and f"[−0.1,{NB}+0.3]" in row[2]
    assert f"27{NB}%" in row[2] and "a long remark," in row[2]


def test_difference_joins_its_interval_and_headers_are_shortened():
    md = rc.grid(["optimizer", "async (2BW, τ = 1)", *rc.COMPARE_HEAD],
                 [["Muon", rc.Val("3.385 ± 0.008", 3), rc.Val("+0.161 ± 0.025", 3),
                   "[+0.100, +0.222]", "3/3", "worse"],
                  ["Lion", rc.Val("4.4 ± 0.0", 3), rc.Val("—"), "—", "—", "—"]])
    head, muon, lion = (r for r in _rows(rc.page_md(md)))
    assert [h.replace(NB, " ") for h in head] == [
        "optimizer", "async (n=3)", "difference [95 % CI] (n=3)", "seeds", "verdict"]
    assert muon[2].replace(NB, " ") == "+0.161 ± 0.025 [+0.100, +0.222]"
    assert lion[2] == "—" and muon[3:] == ["3/3", "worse"]


def test_a_wide_table_is_split_with_its_labels_repeated_and_no_value_lost():
    head = ["optimizer", "β", *(f"mode {k}" for k in range(6))]
    body = [[o, b, *(rc.Val(f"{k}.{i}00 ± 0.0{k}0", 3) for k in range(6))]
            for i, (o, b) in enumerate((("Muon", "0.9"), ("AdamW", "0.95")))]
    md = rc.grid(head, body)
    assert len(md.splitlines()[0]) > 0 and md.count("\n\n") == 0
    parts = rc.page_md(md).split("\n\n")
    assert len(parts) >= 2
    seen = []
    for part in parts:
        rows = _rows(part)
        widths = [max(rc._width_px(r[j], head=i == 0) for i, r in enumerate(rows))
                  for j in range(len(rows[0]))]
        assert sum(widths) <= rc.COLUMN_PX
        assert [r[:2] for r in rows] == [["optimizer", "β"], ["Muon", "0.9"],
                                         ["AdamW", "0.95"]]
        seen += [c.replace(NB, " ") for r in rows[1:] for c in r[2:]]
    want = [f"{k}.{i}00 ± 0.0{k}0" for k in range(6) for i in range(2)]
    assert sorted(seen) == sorted(want)


def test_a_table_that_fits_is_one_table():
    md = rc.grid(["optimizer", "sync"], [["Muon", rc.Val("3.2 ± 0.1", 3)]])
    out = rc.page_md(md)
    assert "\n\n" not in out and len(_rows(out)) == 2


def test_a_wide_table_with_one_value_column_stays_one_table():
    long = "a long prose cell that has to wrap, " * 8
    rows = [["label", "value"], ["x", long], ["y", long]]
    assert rc._split_wide(rows) == [rows]
