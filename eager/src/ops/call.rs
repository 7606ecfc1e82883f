//! A call of a compiled function: one program of many traced ops, each emitted by its own
//! definition (see `crate::compile`, which traces it). A recording met again (a loop's fused
//! step, a composite op, a backward pass) gets the program emitted the first time.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Spec;
use crate::shared::{lock, Shared};

use super::emit::{module, Emitter, Value};
use super::{Checks, Grads, IndexCheck, Op, OpDef, Operand};

/// A value of a traced program: a parameter, or the result of an op on earlier values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ValueDef {
    Param(usize),
    Op { op: Op, inputs: SmallVec<[usize; 3]> },
}

/// A compiled function's StableHLO module, with its signature.
#[derive(Debug)]
pub struct Program {
    /// The function's name.
    pub name: &'static str,
    /// The StableHLO module's text.
    pub text: String,
    /// The specs of the parameters.
    pub params: Vec<Spec>,
    /// The specs of the results.
    pub outputs: Vec<Spec>,
    /// Ops traced into it.
    pub ops: usize,
    /// `(parameter, output)` pairs whose output may be written into the parameter's buffer
    /// when the caller donates it (a Var the program overwrites, a donated argument).
    pub aliases: Vec<(usize, usize)>,
    /// The index checks of its indexing ops, returned after its outputs, each naming its op.
    pub(crate) checks: Vec<IndexCheck>,
    /// Compiled at the quick tier first and optimized once hot, as a one-op program (an op
    /// made of others); otherwise optimized at once (a compiled function).
    pub tiered: bool,
    hash: u64,
}

impl PartialEq for Program {
    fn eq(&self, other: &Program) -> bool {
        std::ptr::eq(self, other) || (self.hash == other.hash && self.text == other.text)
    }
}
impl Eq for Program {}
impl std::hash::Hash for Program {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.hash.hash(h)
    }
}

impl Program {
    /// Emits the module of a traced function: `values` in order (parameters `0..params` among
    /// them), returning `outputs`. Each op is emitted by its own [`Op`] definition.
    pub(crate) fn new(
        name: &'static str,
        values: &[(ValueDef, Spec)],
        params: usize,
        outputs: &[usize],
        ops: usize,
        aliases: &[(usize, usize)],
    ) -> Program {
        let mut e = Emitter::default();
        let mut emitted: Vec<Value> = Vec::with_capacity(values.len());
        let mut param_specs = vec![Spec::new(&[], DType::F32); params];
        let (mut flags, mut checks) = (Vec::new(), Vec::new());
        for (def, spec) in values {
            let v = match def {
                ValueDef::Param(i) => {
                    param_specs[*i] = spec.clone();
                    Value { name: format!("%arg{i}"), spec: spec.clone() }
                }
                ValueDef::Op { op, inputs } => {
                    let args: Vec<Value> = inputs.iter().map(|&i| emitted[i].clone()).collect();
                    let v = op.emit(&mut e, &args, spec);
                    // An indexing op's check, named by the op and its inputs.
                    let specs: Vec<Spec> = args.iter().map(|a| a.spec.clone()).collect();
                    for (flag, mut check) in e.extra.drain(..).zip(op.index_checks(&specs)) {
                        let shapes: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
                        check.op = Some(format!("{}({}) {{{}}}", op.name(), shapes.join(", "), op.attrs()));
                        flags.push(flag);
                        checks.push(check);
                    }
                    v
                }
            };
            emitted.push(v);
        }
        let results: Vec<Value> = outputs.iter().map(|&o| emitted[o].clone()).collect();
        let returned: Vec<Value> = results.iter().cloned().chain(flags).collect();
        let text = module(name, &param_specs, aliases, &returned, &e.body);
        let mut h = rustc_hash::FxHasher::default();
        text.hash(&mut h);
        let outputs = results.into_iter().map(|v| v.spec).collect();
        let aliases = aliases.to_vec();
        Program {
            name,
            text,
            params: param_specs,
            outputs,
            ops,
            aliases,
            checks,
            tiered: false,
            hash: h.finish(),
        }
    }
}

/// What a program is emitted from: equal recordings emit equal text (an op's attributes are
/// all that its emission reads, as for the one-op cache's keys).
struct Recorded {
    name: &'static str,
    values: Vec<(ValueDef, Spec)>,
    params: usize,
    outputs: Vec<usize>,
    ops: usize,
    tiered: bool,
    aliases: Vec<(usize, usize)>,
}

/// Programs emitted from recordings, by the recording's hash. Emitting is ~2.4 µs an op
/// (text formatting): 2.7 ms for a GPT training step recorded as one program, every step.
#[derive(Default)]
struct EmittedPrograms {
    by_hash: HashMap<u64, Vec<(Recorded, Arc<Program>)>>,
    ops: usize,
}

static EMITTED: Shared<Mutex<EmittedPrograms>> = Shared::new("eager::ops::EmittedPrograms", Default::default);

/// Ops held by [`EMITTED`]'s recordings at most (about 100 bytes each) before it starts afresh.
const EMITTED_OPS: usize = 200_000;

impl Program {
    /// The program of a recording ([`Program::new`]'s arguments, and whether it is tiered),
    /// emitted once: a recording equal to one seen before gets that program (and so the
    /// executable cached for it, found by pointer).
    pub(crate) fn of_recording(
        name: &'static str,
        values: &[(ValueDef, Spec)],
        params: usize,
        outputs: &[usize],
        ops: usize,
        tiered: bool,
        aliases: &[(usize, usize)],
    ) -> Arc<Program> {
        let mut h = rustc_hash::FxHasher::default();
        (name, params, outputs, ops, tiered, values, aliases).hash(&mut h);
        let hash = h.finish();
        let same = |r: &Recorded| {
            r.name == name
                && r.params == params
                && r.ops == ops
                && r.tiered == tiered
                && r.outputs == outputs
                && r.aliases == aliases
                && r.values == values
        };
        let emitted = EMITTED.get();
        if let Some(p) = lock(emitted).by_hash.get(&hash).and_then(|v| v.iter().find(|(r, _)| same(r))) {
            return p.1.clone();
        }
        let mut program = Program::new(name, values, params, outputs, ops, aliases);
        program.tiered = tiered;
        let program = Arc::new(program);
        let count = values.len();
        let (values, outputs, aliases) = (values.to_vec(), outputs.to_vec(), aliases.to_vec());
        let recorded = Recorded { name, values, params, outputs, ops, tiered, aliases };
        let mut e = lock(emitted);
        if e.ops + count > EMITTED_OPS {
            *e = EmittedPrograms::default();
        }
        e.ops += count;
        e.by_hash.entry(hash).or_default().push((recorded, program.clone()));
        program
    }
}

/// A call of a compiled function's program.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Call {
    /// The program called.
    pub program: Arc<Program>,
}

impl OpDef for Call {
    fn name(&self) -> &'static str {
        self.program.name
    }
    fn attrs(&self) -> String {
        format!("{} ops compiled into one", self.program.ops)
    }
    fn infer(&self, inputs: &[Spec]) -> Result<Spec> {
        let p = &self.program;
        if inputs.len() != p.params.len() || inputs.iter().zip(&p.params).any(|(a, b)| a != b) {
            let got: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
            let want: Vec<String> = p.params.iter().map(|s| s.to_string()).collect();
            let msg = format!("compiled for ({}), called with ({})", want.join(", "), got.join(", "));
            return Err(Error::shape(p.name, msg));
        }
        Ok(p.outputs[0].clone())
    }
    fn emit(&self, _e: &mut Emitter, _x: &[Value], _out: &Spec) -> Value {
        unreachable!("a compiled function's module is emitted whole by Program::new")
    }
    fn backward<T: Operand>(&self, _x: &[&T], _out: &T, _g: &T) -> Result<Grads<T>> {
        Err(Error::invalid(
            self.program.name,
            "cannot differentiate through a compiled function: call backward() inside it and return the gradients",
        ))
    }
    fn more_outputs(&self) -> &[Spec] {
        &self.program.outputs[1..]
    }
    fn index_checks(&self, _inputs: &[Spec]) -> Checks {
        self.program.checks.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Binary;

    #[test]
    fn a_recording_met_again_gets_the_program_emitted_the_first_time() {
        let f = Spec::new(&[3], DType::F32);
        let values = |op: Binary| {
            vec![
                (ValueDef::Param(0), f.clone()),
                (ValueDef::Param(1), f.clone()),
                (ValueDef::Op { op: Op::Binary(op), inputs: smallvec::smallvec![0, 1] }, f.clone()),
            ]
        };
        let a = Program::of_recording("emitted_once", &values(Binary::Mul), 2, &[2], 1, true, &[]);
        let b = Program::of_recording("emitted_once", &values(Binary::Mul), 2, &[2], 1, true, &[]);
        assert!(Arc::ptr_eq(&a, &b), "the same recording: the same program");
        assert!(a.tiered && a.text.contains("stablehlo.multiply"), "{}", a.text);
        let other = Program::of_recording("emitted_once", &values(Binary::Add), 2, &[2], 1, true, &[]);
        assert!(other.text.contains("stablehlo.add") && !Arc::ptr_eq(&a, &other));
        let untiered = Program::of_recording("emitted_once", &values(Binary::Mul), 2, &[2], 1, false, &[]);
        assert!(!untiered.tiered && !Arc::ptr_eq(&a, &untiered));
        let more = Program::of_recording("emitted_once", &values(Binary::Mul), 2, &[2, 0], 1, true, &[]);
        assert_eq!(more.outputs.len(), 2);
    }

    #[test]
    fn a_program_emits_each_op_by_its_own_definition() {
        let f = Spec::new(&[3], DType::F32);
        let values = vec![
            (ValueDef::Param(0), f.clone()),
            (ValueDef::Param(1), f.clone()),
            (ValueDef::Op { op: Op::Binary(Binary::Mul), inputs: smallvec::smallvec![0, 1] }, f.clone()),
        ];
        let p = Program::new("step", &values, 2, &[2, 0], 1, &[]);
        assert!(p.text.starts_with("module @eager_step"), "{}", p.text);
        assert!(p.text.contains("\"stablehlo.multiply\"(%arg0, %arg1)"), "{}", p.text);
        assert!(p.text.contains("\"func.return\"(%1, %arg0)"), "{}", p.text);
        let call = Call { program: Arc::new(p) };
        assert_eq!(call.more_outputs(), std::slice::from_ref(&f));
        assert!(call.infer(std::slice::from_ref(&f)).unwrap_err().to_string().contains("compiled for"));
    }
}
