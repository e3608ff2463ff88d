"""The file reads as a book: the algorithm first and within its 250 lines,
then the tools of evidence, the lesson, the chapters in run order and the
command line, each part and chapter under its banner. Calls go backwards
only: a chapter uses the algorithm, the tools, the lesson and earlier
chapters, never a later one, and nothing calls the command line."""
import ast
import re
from pathlib import Path

import speculative_decoding_from_scratch as sd

SOURCE = Path(sd.__file__).read_text()
TREE = ast.parse(SOURCE)
LINES = SOURCE.splitlines()


def places():
    """Each top-level name -> the place it sits in, as an ordered key: the
    part (1 to 5), then the chapter number within part 4."""
    marks = []  # (line, key)
    for i, line in enumerate(LINES, start=1):
        if m := re.match(r"# (?:=+ )?Part (\d)\.", line):
            marks.append((i, (int(m[1]), 0)))
        elif m := re.match(r"# Chapter (\d+)\. ", line):
            marks.append((i, (4, int(m[1]))))
    where = {}
    for node in TREE.body:
        names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                 [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)])
        key = max((k for line, k in marks if line < node.lineno), default=(1, 0))
        where.update(dict.fromkeys(names, key))
    return where


WHERE = places()


def test_the_parts_and_chapters_stand_in_order_each_once():
    titles = [re.match(r"# (?:=+ )?(Part \d|Chapter \d+)\.", line)[1] for line in LINES
              if re.match(r"# (?:=+ )?(Part \d|Chapter \d+)\. ", line)]
    assert titles == ["Part 1", "Part 2", "Part 3", "Part 4"] + [f"Chapter {n}" for n in sd.CHAPTERS] + ["Part 5"]
    for n, (title, function) in sd.CHAPTERS.items():  # each chapter's banner asks its question, and holds its demo
        assert f"# Chapter {n}. {title}" in LINES and WHERE[function.__name__] == (4, int(n))
    for n, (_, function) in sd.LESSON.items():
        assert WHERE[function.__name__] == (3, 0)


def used_names(node):
    """The module-level names a function reads: every name it loads that it
    does not bind itself (an argument, an assignment, a loop variable)."""
    local = {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
             for a in n.posonlyargs + n.args + n.kwonlyargs + [n.vararg, n.kwarg] if a}
    local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and n.id in WHERE and n.id not in local and n.id != node.name}


def test_calls_go_backwards_only():
    # one exception: the algorithm's input checks (as_table, one_hot, row_flaw...) sit just after
    # it, with the tools, so that its first 250 lines are the paper's loop alone
    later = []
    for node in TREE.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            later += [f"{node.name} {WHERE[node.name]} uses {u} {WHERE[u]}" for u in used_names(node)
                      if WHERE[u] > WHERE[node.name] and not (WHERE[node.name] == (1, 0) and WHERE[u] == (2, 0))]
    assert later == []


def test_the_algorithm_ends_by_line_250_of_code_and_verify_round_is_short():
    fn = {n.name: n for n in TREE.body if isinstance(n, ast.FunctionDef)}
    imports = max(n.end_lineno for n in TREE.body if isinstance(n, (ast.Import, ast.ImportFrom)))
    assert fn["take"].end_lineno - imports <= 250
    body = fn["verify_round"].body[1:]  # past its docstring
    assert body[-1].end_lineno - body[0].lineno + 1 <= 12


def test_no_chapter_is_longer_than_about_350_lines():
    starts = [i for i, line in enumerate(LINES) if re.match(r"# (Chapter \d+|=+ Part 5)\.", line)
              or re.match(r"# Part 5\.", line)]
    lengths = [b - a for a, b in zip(starts, starts[1:])]
    assert max(lengths) <= 360, lengths
