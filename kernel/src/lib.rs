//! The eager Jupyter kernel (its issue builds it on the REPL session engine).
