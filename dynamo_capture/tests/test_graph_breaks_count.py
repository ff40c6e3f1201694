"""The break programs, counted: every program of the graph-break test files checks its
result against eager, its side effects (printed text, appended LOG entries, outside
lists), the number of graphs and of breaks, and that a second call compiles nothing
new (resume functions compiled once and reused).

    test_graph_breaks.py          PROGRAMS (13) + loop/try/with statements (4)
    test_graph_breaks_corpus.py   CASES: 5 frame shapes x 7 break kinds (35)
    test_graph_breaks_with.py     PROGRAMS: grad-mode and autocast blocks (34)
    test_graph_breaks_callees.py  PROGRAMS: breaks inside callees (20)
    test_graph_breaks_flow.py     PROGRAMS: branches, loops, try blocks (30)
    test_graph_breaks_exact.py    PROGRAMS: cuts at the exact instruction (10)
    test_graph_breaks_models.py   MODELS: GPT2, Llama, T5 with a print in the MLP (3)
"""

from __future__ import annotations

import test_graph_breaks
import test_graph_breaks_callees
import test_graph_breaks_corpus
import test_graph_breaks_exact
import test_graph_breaks_flow
import test_graph_breaks_with


def test_at_least_100_break_programs():
    statements = 4  # loops, while_loop, in_try, in_no_grad
    count = (
        len(test_graph_breaks.PROGRAMS)
        + statements
        + len(test_graph_breaks_corpus.CASES)
        + len(test_graph_breaks_with.PROGRAMS)
        + len(test_graph_breaks_callees.PROGRAMS)
        + len(test_graph_breaks_flow.PROGRAMS)
        + len(test_graph_breaks_exact.PROGRAMS)
        + 3  # test_graph_breaks_models.MODELS (skipped without transformers)
    )
    assert count >= 100, count
