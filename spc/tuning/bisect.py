"""`spc bisect SAFE.ttplan FAST.ttplan INPUT...`: which precision differences cost the accuracy.

Both plans must come from the same ONNX and lower to the same ttnn calls; they may differ only
in per-block precision (weights format, fidelity, accumulation, output format). Hybrids take
SAFE's program with FAST's settings on a subset of blocks. "Loses accuracy" means the same as
for ``--precision auto``: keypoint F1 (median over the inputs) more than 0.01 below SAFE's, or
descriptor PCC (worst input) more than 0.001 below, both against onnxruntime.

The answer is 1-minimal: every block in it is needed (removing any one restores accuracy).
Single blocks that fail on their own are reported first; otherwise differences are removed
one at a time from the full set while it still fails.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from msgspec import Struct
from msgspec.structs import replace

from spc.errors import SpcError
from spc.plan.io import Plan
from spc.plan.program import TtOp
from spc.runtime.inputs import load_input
from spc.ttnn.precision import BlockPrecision
from spc.tuning.comparison import Comparison, find_source
from spc.tuning.precision_search import Score
from spc.tuning.thresholds import Thresholds


class Difference(Struct):
    block: str
    safe: str
    fast: str

    def __str__(self) -> str:
        return f"{self.block}: {self.safe} -> {self.fast}"


class BisectResult(Struct):
    safe: Score
    fast: Score
    culprits: list[Difference]
    differences: list[Difference]
    message: str


def _setting(op: TtOp) -> str:
    """A call's precision as the IR spells a block's (BlockPrecision.spell): a conv's all of it,
    another call's its output format."""
    conv, cc = op.args.get("conv_config"), op.args.get("compute_config")
    if conv is not None and cc is not None:
        return BlockPrecision(conv.weights_dtype, cc.math_fidelity, cc.fp32_dest_acc_en, op.dtype,
                              cc.packer_l1_acc).spell()
    return BlockPrecision.spell_output(op.dtype)


def differences(safe: Plan, fast: Plan) -> list[Difference]:
    if safe.manifest.get("source", {}).get("sha256") != fast.manifest.get("source", {}).get("sha256"):
        raise SpcError("the two plans were compiled from different ONNX files")
    a, b = safe.program.device_ops, fast.program.device_ops
    if [(o.op, o.block) for o in a] != [(o.op, o.block) for o in b]:
        raise SpcError("the two plans lower to different ttnn programs; bisect compares precision only "
                       "(compile both from the same ONNX with the same options but precision)")
    out: dict[str, Difference] = {}
    for x, y in zip(a, b):
        if _setting(x) != _setting(y) and x.block not in out:
            out[x.block] = Difference(x.block, _setting(x), _setting(y))
    return list(out.values())


def hybrid(safe: Plan, fast: Plan, blocks: set[str]) -> Plan:
    """SAFE's program with FAST's precision on ``blocks``."""
    program = copy.deepcopy(safe.program)
    for op, theirs in zip(program.device_ops, fast.program.device_ops):
        if op.block in blocks:
            # the precision only: the configurations are frozen values, the memory choices stay SAFE's
            if "conv_config" in op.args:
                op.args["conv_config"] = replace(op.args["conv_config"],
                                                 weights_dtype=theirs.args["conv_config"].weights_dtype)
            for key in ("compute_config", "dtype"):
                if key in theirs.args:
                    op.args[key] = theirs.args[key]
            op.dtype = theirs.dtype
    return Plan(safe.manifest, program, safe.weights, safe.ir_text)


def bisect(safe: Plan, safe_path: Path, fast: Plan, files: list[Path], onnx: Path | None = None,
           thresholds: Thresholds | None = None, log: Callable[[str], None] = print) -> BisectResult:
    thresholds = thresholds or Thresholds()
    diffs = differences(safe, fast)
    if not diffs:
        raise SpcError("the two plans have the same precision everywhere: nothing to bisect")
    src = find_source(safe, safe_path, onnx)
    shape = [int(d) for d in safe.program.inputs[0].shape]
    probes = {role: t.name for role, t in safe.program.probes.items()}
    comparison = Comparison(src, probes, [load_input(f, shape, safe.program.image) for f in files])

    def score(plan: Plan) -> Score:
        return Score.of(comparison.reports(plan), 0.0)

    base = score(safe)
    min_f1 = thresholds.min_f1 if thresholds.min_f1 is not None else base.f1 - thresholds.f1_drop
    min_desc = (thresholds.min_desc_pcc if thresholds.min_desc_pcc is not None
                else base.descriptor_pcc - thresholds.desc_pcc_drop)

    def fails(blocks: set[str], what: str) -> bool:
        s = score(hybrid(safe, fast, blocks))
        bad = not s.passes(min_f1, min_desc)
        log(f"  {'fails' if bad else 'holds'}  F1 {s.f1:.4f}  desc PCC {s.descriptor_pcc:.5f}  {what}")
        return bad

    log(f"  safe: F1 {base.f1:.4f}, desc PCC {base.descriptor_pcc:.5f}; thresholds F1 >= {min_f1:.4f}, "
        f"desc PCC >= {min_desc:.5f}; {len(diffs)} differing block(s)")
    everything = {d.block for d in diffs}
    full = score(fast)
    if full.passes(min_f1, min_desc):
        return BisectResult(base, full, [], diffs, "FAST keeps accuracy on these inputs: nothing to blame")
    singles = [d for d in diffs if fails({d.block}, d.block)]
    if singles:
        return BisectResult(base, full, singles, diffs,
                            f"{len(singles)} block(s) lose accuracy on their own")
    keep = set(everything)
    for d in diffs:
        trial = keep - {d.block}
        if trial and fails(trial, f"without {d.block}"):
            keep = trial
    culprits = [d for d in diffs if d.block in keep]
    return BisectResult(base, full, culprits, diffs,
                        f"these {len(culprits)} block(s) together lose accuracy; each is needed")
