"""No function in src/ is longer than MAX_LINES (issue 39): a long function is a sign that
computing and presenting, or several commands, share one body."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 120


def long_functions():
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    out.append(
                        "%s:%d %s (%d lines)"
                        % (path.relative_to(SRC), node.lineno, node.name, lines)
                    )
    return out


def test_no_function_is_longer_than_the_limit():
    assert long_functions() == []
