//! `+ - * /` and unary `-` on tensors and `f64` scalars. Operators cannot return `Result`:
//! they panic with the same message the method would return.

use crate::error::Result;
use crate::ops::Operand;

use super::Tensor;

#[track_caller]
fn or_panic(r: Result<Tensor>) -> Tensor {
    match r {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

macro_rules! operator {
    ($trait:ident, $f:ident, $method:ident, $scalar:ident) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: &Tensor) -> Tensor {
                or_panic(Tensor::$method(&self, &rhs))
            }
        }
        impl std::ops::$trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: Tensor) -> Tensor {
                or_panic(Tensor::$method(&self, &rhs))
            }
        }
        impl std::ops::$trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: &Tensor) -> Tensor {
                or_panic(Tensor::$method(&self, &rhs))
            }
        }
        impl std::ops::$trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: Tensor) -> Tensor {
                or_panic(Tensor::$method(&self, &rhs))
            }
        }
        impl std::ops::$trait<f64> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: f64) -> Tensor {
                or_panic(Tensor::$scalar(&self, rhs))
            }
        }
        impl std::ops::$trait<f64> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: f64) -> Tensor {
                or_panic(Tensor::$scalar(&self, rhs))
            }
        }
        impl std::ops::$trait<&Tensor> for f64 {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: &Tensor) -> Tensor {
                or_panic(rhs.scalar_like(self).and_then(|s| Tensor::$method(&s, &rhs)))
            }
        }
        impl std::ops::$trait<Tensor> for f64 {
            type Output = Tensor;
            #[track_caller]
            fn $f(self, rhs: Tensor) -> Tensor {
                or_panic(rhs.scalar_like(self).and_then(|s| Tensor::$method(&s, &rhs)))
            }
        }
    };
}
operator!(Add, add, add, add_scalar);
operator!(Sub, sub, sub, sub_scalar);
operator!(Mul, mul, mul, mul_scalar);
operator!(Div, div, div, div_scalar);

impl std::ops::Neg for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        or_panic(Tensor::neg(self))
    }
}
impl std::ops::Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        or_panic(Tensor::neg(&self))
    }
}
