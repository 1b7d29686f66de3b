"""The default compilation pipeline, in order. Each pass lives in its own module."""

from __future__ import annotations

from spc.passes.batch_images import BatchImages
from spc.passes.choose_precision import ChoosePrecision
from spc.passes.conv1d import Conv1d
from spc.passes.eliminate_dead_code import EliminateDeadCode
from spc.passes.fold_batchnorm import FoldBatchNorm
from spc.passes.fold_constants import FoldConstants
from spc.passes.fold_qdq import FoldQdq
from spc.passes.fuse_conv_bias_relu import FuseConvBiasRelu
from spc.passes.fuse_keypoints import FuseKeypoints
from spc.passes.fuse_l2norm import FuseL2Norm
from spc.passes.fuse_score_fold import FuseScoreFold
from spc.passes.insert_device_nms import InsertDeviceNms
from spc.passes.manager import Pass, Stage
from spc.passes.partition_host_device import PartitionHostDevice
from spc.passes.remove_identity import RemoveIdentity
from spc.passes.simplify_shapes import SimplifyShapes


def default_pipeline(batch: int = 1) -> list[Pass]:
    """The passes in order; ``batch`` > 1 (``--batch``) adds batch-images once the shapes are
    constants (a batch-1 export's shape arithmetic folded, its one-image loop gone)."""
    return [
        FoldQdq(),
        FoldConstants(),
        SimplifyShapes(),
        RemoveIdentity(),
        EliminateDeadCode(),
        *([BatchImages(batch)] if batch > 1 else []),
        FoldBatchNorm(),
        Conv1d(),
        FuseConvBiasRelu(),
        FuseScoreFold(),
        InsertDeviceNms(),
        FuseL2Norm(),
        PartitionHostDevice(),
        FuseKeypoints(),
        ChoosePrecision(),
    ]


# after lowering, on the program: listed and dumped as the passes are, --stop-after can name it
MEMORY = Stage("choose-memory-config", "per conv and pool block: L1 or DRAM slices (memory/planner.py, on the "
               "lowered program)")
STAGES = (MEMORY,)

PASS_NAMES = [p.name for p in default_pipeline()]
