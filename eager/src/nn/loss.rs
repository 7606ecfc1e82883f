//! Losses (torch's `F.cross_entropy`, `F.mse_loss` with mean reduction). Autocast
//! ([`autocast`](mod@crate::autocast)): both on the f32 list (half inputs cast up, the loss f32).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Mean cross-entropy of `logits [N, C]` against integer class `targets [N]` (i32 or i64),
/// computed from log-softmax (as torch's `cross_entropy`). A target outside `0..C` uploaded
/// from the host is an error (torch: "Target 7 is out of bounds"); one computed on the device
/// is not checked and adds nothing to the loss.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    if logits.rank() != 2 || targets.rank() != 1 || targets.shape()[0] != logits.shape()[0] {
        return Err(Error::shape(
            "cross_entropy",
            format!(
                "needs logits [N, C] and targets [N], got {:?} and {:?}",
                logits.shape(),
                targets.shape()
            ),
        ));
    }
    if !matches!(targets.dtype(), DType::I32 | DType::I64) {
        return Err(Error::dtype(
            "cross_entropy",
            format!("targets must be class indices (i32 or i64), got {}", targets.dtype()),
        ));
    }
    let classes = logits.shape()[1];
    // Targets from the host are checked here (a bad one would silently pick no class);
    // targets computed on the device are not.
    if let Some((lo, hi)) = targets.host_bounds().filter(|(lo, hi)| lo <= hi) {
        if lo < 0 || hi >= classes as i64 {
            let bad = if lo < 0 { lo } else { hi };
            let msg = format!("target {bad} is out of range for {classes} classes");
            return Err(Error::invalid("cross_entropy", msg));
        }
    }
    let logits = &crate::ops::autocast_f32(logits)?;
    crate::compile::fused_op("cross_entropy", || {
        // Targets split over a mesh (a data-parallel batch) compare with the classes everywhere.
        let positions =
            crate::ops::create::CreateOps::arange_at(targets, 0.0, classes as f64, 1.0, targets.dtype())?;
        let onehot = targets.unsqueeze(1)?.eq(&positions.unsqueeze(0)?)?.to_dtype(logits.dtype())?;
        logits.log_softmax(1)?.mul(&onehot)?.sum(&[1], false)?.mean_all()?.neg()
    })
}

/// Mean squared error.
pub fn mse(prediction: &Tensor, target: &Tensor) -> Result<Tensor> {
    let (prediction, target) = (&crate::ops::autocast_f32(prediction)?, &crate::ops::autocast_f32(target)?);
    crate::compile::fused_op("mse", || {
        let d = prediction.sub(target)?;
        d.mul(&d)?.mean_all()
    })
}
