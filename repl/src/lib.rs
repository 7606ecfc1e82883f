//! The eager terminal REPL (its issue builds it on evcxr).
