//! Upstream-dialect dispatch table: the `quant` ops and the `arith` float ops a lowered or
//! hand-written module may hold.

use super::kernels::elementwise::{arith, BinOp};
use super::kernels::quant::{dcast, qcast};
use super::kernels::{one, Kernel};
use super::tf::Builder;

pub const TABLE: &[(&str, Builder)] = &[
    ("quant.qcast", |d| {
        let p = d
            .result_quant
            .first()
            .cloned()
            .flatten()
            .ok_or("qcast result is not a !quant.uniform tensor")?;
        Ok(one(move |x| qcast(x[0], &p)))
    }),
    ("quant.dcast", |d| {
        let p = d
            .operand_quant
            .first()
            .cloned()
            .flatten()
            .ok_or("dcast operand is not a !quant.uniform tensor")?;
        Ok(one(move |x| dcast(x[0], &p)))
    }),
    // storage ⇄ quantized type: the values are the storage integers either way
    ("quant.scast", |_| Ok(one(|x| Ok(x[0].clone())))),
    ("arith.addf", |_| bin(BinOp::Add)),
    ("arith.subf", |_| bin(BinOp::Sub)),
    ("arith.mulf", |_| bin(BinOp::Mul)),
    ("arith.divf", |_| bin(BinOp::Div)),
    ("arith.maximumf", |_| bin(BinOp::Max)),
    ("arith.minimumf", |_| bin(BinOp::Min)),
    ("arith.addi", |_| bin(BinOp::Add)),
    ("arith.subi", |_| bin(BinOp::Sub)),
    ("arith.muli", |_| bin(BinOp::Mul)),
];

fn bin(op: BinOp) -> Result<Box<dyn Kernel>, String> {
    Ok(one(move |x| arith(op, x[0], x[1])))
}

pub fn lookup(name: &str) -> Option<Builder> {
    TABLE.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}
