"""``spc.kernel``: a fused kernel (spc/kernels) standing for the stock calls it replaces, which it
carries (``composed``). The plan verifier checks it against its own composition, the validation
and the emulator run what it composes or its reference, and the ttnn backend launches it itself:
it has no ttnn spelling, meaning or golden function of its own."""

from __future__ import annotations

from spc.ttnn.calls.definition import JsonObject, define

define("spc.kernel", None, None, None, inputs=(1, 8),
       args={"kernel": str, "params": JsonObject, "composed": list[JsonObject]},
       required=frozenset({"kernel", "composed"}), extra_outputs=8)
