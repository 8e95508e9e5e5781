"""A calculator that cannot be talked into running code: the expression is parsed (Python's own
parser, `ast`) and only numbers, arithmetic and a few math functions are evaluated. No `eval`, no
names other than those below, no attribute access, and bounds on what would take long (huge
powers, factorials, long inputs)."""

from __future__ import annotations

import ast
import math
import operator
from typing import Callable

MAX_CHARS = 500
MAX_EXPONENT = 10_000  # 2 ** 10_000 is instant; 10 ** 10 ** 10 would hang
MAX_FACTORIAL = 1_000
MAX_DIGITS = 4_300  # what int → str allows by default

Number = int | float
_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: pow}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Number]] = {"sqrt": math.sqrt, "exp": math.exp, "ln": math.log, "log": math.log, "log10": math.log10,
              "log2": math.log2, "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin,
              "acos": math.acos, "atan": math.atan, "abs": abs, "round": round, "floor": math.floor,
              "ceil": math.ceil, "factorial": math.factorial, "min": min, "max": max}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


class CalculatorError(ValueError):
    pass


def calculate(expression: str) -> int | float:
    """The value of an arithmetic expression ("2 * (3 + 4) ** 2", "sqrt(2) / 2", "15% of 80" is
    not one: write 0.15 * 80).

    Raises:
        CalculatorError: anything else, said in words.
    """
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot read {expression!r} as arithmetic") from None
    try:
        value = _eval(tree.body)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except (OverflowError, ValueError) as exc:
        raise CalculatorError(f"out of range: {exc}") from None
    if isinstance(value, int) and value.bit_length() > MAX_DIGITS * 3.33:
        raise CalculatorError("the result has too many digits to show")
    return value


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponents above {MAX_EXPONENT} are not computed")
        return _BINARY[type(node.op)](left, right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
            and not node.keywords and len(node.args) <= 8):
        args = [_eval(a) for a in node.args]
        if node.func.id == "factorial" and (not args or not isinstance(args[0], int) or args[0] > MAX_FACTORIAL):
            raise CalculatorError(f"factorial takes a whole number up to {MAX_FACTORIAL}")
        return _FUNCTIONS[node.func.id](*args)
    raise CalculatorError(f"only numbers, + - * / // % **, parentheses and {', '.join(sorted(_FUNCTIONS))} "
                          "are understood")
