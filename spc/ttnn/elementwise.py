"""ttnn's element-wise calls by how they are spelled: the plan's vocabulary (plan/calls.py) and the
calls' descriptions (ttnn/calls.py) both read these sets."""

from __future__ import annotations

# calls spelled fn(input[, other or scalar])
BINARY = {"eq", "ne", "gt", "ge", "lt", "le", "logical_and", "logical_or", "logical_xor", "multiply", "add",
          "subtract", "divide", "rsub", "maximum", "minimum"}
UNARY = {"gtz", "logical_not", "rsqrt", "floor", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "reciprocal",
         "neg", "abs", "ceil", "round", "sign", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
         "acosh", "atanh", "erf", "softsign", "softplus", "hardswish", "mish", "isnan", "isinf"}
# calls spelled fn(input, *, keyword=...)
UNARY_KEYWORDS = {"elu": ("alpha",), "celu": ("alpha",), "selu": ("scale", "alpha")}
